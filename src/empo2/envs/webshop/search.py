"""BM25 product search standing in for the original's Lucene index (docs/webshop.md, What is approximate).

Documents are the original's: ``lower(" ".join([Title, Description, BulletPoints[0],
option_text]))``. Text is analysed like Anserini's default English analyzer, approximately:
a UAX#29-like word regex, the English possessive filter, lower-casing, Lucene's 33-word stop
set and Porter stemming (PyStemmer ``porter``). Scores are BM25 (k1 = 0.9, b = 0.4, Lucene idf)
from ``bm25s``; only documents with a positive score are returned, best first, ties by index
order, at most 50. Exact parity with Lucene is not possible (Lucene stores document lengths
lossily and tokenises slightly differently), so rankings are close, not identical.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer

from empo2.envs.webshop.data import Product

logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import: keep piped logs quiet

log = logging.getLogger(__name__)

SEARCH_RETURN_N = 50
LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there"
    " these they this to was will with".split())
_WORD = re.compile(r"\w+(?:[.'’]\w+)*")
_STEMMER = Stemmer.Stemmer("porter")
_STEM_LOCK = threading.Lock()  # PyStemmer objects are not safe to share between threads


def analyze(text: str) -> list[str]:
    """Lucene-like analysis of a document or query.

    Args:
        text: any text.

    Returns:
        Tokens: words (``\\w+`` runs joined by inner ``.``, ``'`` or ``’``, so ``3.1`` and
        ``d.o.n`` stay whole), lower-cased, a trailing possessive ``'s`` removed, Lucene
        stop words dropped, Porter-stemmed. Repeated tokens are kept (they count repeatedly).
    """
    words = []
    for w in _WORD.findall(text.lower()):
        if w.endswith(("'s", "’s")):
            w = w[:-2]
        if w and w not in LUCENE_STOP_WORDS:
            words.append(w)
    with _STEM_LOCK:
        return _STEMMER.stemWords(words)


def document_text(product: Product) -> str:
    """The indexed text of a product (``convert_product_file_format.py``).

    Returns:
        ``" ".join([title, description, first bullet point, option_text]).lower()`` with
        option_text = ``", and ".join(f"{name}: {', '.join(values)}")``. A product without
        bullet points uses '' (the original indexing script would crash).
    """
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullet_points[0] if product.bullet_points else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


class SearchEngine:
    """BM25 over the product documents; thread-safe, with a small query cache.

    Args:
        products: the catalogue, in index order (ties are broken by this order).
        k1, b: BM25 parameters (Anserini defaults).

    Raises:
        ValueError: ``products`` is empty.
    """

    def __init__(self, products: Sequence[Product], k1: float = 0.9, b: float = 0.4) -> None:
        if not products:
            raise ValueError("cannot index an empty catalogue")
        self._retriever = bm25s.BM25(method="lucene", idf_method="lucene", k1=k1, b=b)
        self._retriever.index([analyze(document_text(p)) for p in products], show_progress=False)
        self._vocab = self._retriever.vocab_dict
        self._lock = threading.Lock()
        self.num_docs = len(products)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one engine per catalogue, kept for the process
    def search(self, query: str, k: int = SEARCH_RETURN_N) -> tuple[int, ...]:
        """Top documents for a query.

        Args:
            query: free text (analysed like the documents).
            k: the most hits to return (capped at the corpus size).

        Returns:
            Document indices with a score > 0, best first, ties by index; empty when no query
            term occurs in the corpus.
        """
        tokens = [t for t in analyze(query) if t in self._vocab]
        if not tokens:
            return ()
        with self._lock:
            scores = np.asarray(self._retriever.get_scores(tokens), dtype=np.float64)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))]  # score descending, then index ascending
        return tuple(int(i) for i in order[: min(k, self.num_docs)])
