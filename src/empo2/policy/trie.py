"""A token-prefix trie over the admissible actions, for ``action.mode: constrained``.

Each admissible action is tokenised (no special tokens) and followed by the end-of-turn id. At
every generated position the trie gives the set of token ids that keep the prefix inside some
admissible action; the sampler masks every other token and renormalises (the behaviour
distribution is the constrained one), and the trainer applies the same per-position sets when
it recomputes log-probs, so importance ratios compare like with like.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


class TokenTrie:
    """Prefix tree of token-id sequences.

    Args:
        sequences: token ids of each admissible action (without the terminator).
        end_id: token id appended to every sequence (the end-of-turn token).

    Raises:
        ValueError: no sequences (nothing could be generated).
    """

    def __init__(self, sequences: Iterable[list[int]], end_id: int):
        self.end_id = int(end_id)
        self.root: dict[int, Any] = {}  # token id -> child node (same shape)
        self._seqs: list[list[int]] = []
        for seq in sequences:
            if not seq:
                continue
            self._seqs.append([int(t) for t in seq])
            node = self.root
            for t in list(seq) + [self.end_id]:
                node = node.setdefault(int(t), {})
        n = len(self._seqs)
        if n == 0:
            raise ValueError("TokenTrie needs at least one non-empty admissible action")
        self.size = n

    def sequences(self) -> list[list[int]]:
        """The non-empty action sequences the trie was built from (without the end id), in input
        order: ``TokenTrie(t.sequences(), t.end_id)`` is the same trie (the vLLM backend ships it so)."""
        return [list(s) for s in self._seqs]

    @classmethod
    def from_actions(cls, actions: Sequence[str] | None, encode: Callable[[str], list[int]],
                     end_id: int) -> "TokenTrie | None":
        """The trie of a turn's admissible actions, or None when none of them has a token.

        The one place a trie is built from action texts (the rollout engine's constrained rows and
        an action selector's proposals): each action is tokenised with ``encode`` (no special tokens) and
        followed by ``end_id`` (the end-of-turn id).

        Args:
            actions: the admissible action texts (None or empty = no constraint).
            encode: text → token ids (``ChatFormat.encode``).
            end_id: the end-of-turn id.
        """
        seqs = [encode(a) for a in (actions or [])]
        return cls(seqs, end_id) if any(seqs) else None

    def allowed(self, prefix: list[int]) -> list[int]:
        """Token ids allowed after ``prefix`` (sorted); [] if the prefix left the trie or ended."""
        node: dict[int, Any] = self.root
        for t in prefix:
            child = node.get(int(t))
            if child is None:
                return []
            node = child
        return sorted(node.keys())
