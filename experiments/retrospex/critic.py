"""The Retrospex critic: text encoders, Q / V / target-Q networks, offline IQL training, save/load.

See docs/retrospex.md, 3. The critic (the authors' ``DRRN_Q``/``DRRN_V``, ``iql.py``; our CPU size).

Two encoders (``action.retrospex.critic.encoder``):

* ``gru`` (the authors' topology, small): a unigram vocabulary (≤ ``vocab_size`` pieces, trained on
  the critic data with the ``tokenizers`` library — the authors used an 8k SentencePiece unigram
  model); each network (Q, V, each twin head) has its own ``Embedding(V, E)`` and one
  unidirectional single-layer ``GRU(E → H)`` per text field; the feature of a field is the GRU's
  final hidden state over its last ``max_tokens`` tokens (packed, no padding seen); features are
  concatenated and fed to ``Linear(F·H → H) → ReLU → Linear(H → 1)``.
* ``minilm`` (labelled faster variant): each field is embedded once by a frozen sentence embedder
  (all-MiniLM-L6-v2, 384-d, cached per distinct text) and the heads are the same MLP over the
  concatenated embeddings (Q: 5·384 → H → 1, V: 4·384 → H → 1 on ScienceWorld).

Q reads the state fields and the action, V the state fields only (``transitions.critic_fields``).
A twin Q (WebShop by default) returns ``min(Q1, Q2)``. Training is ``iql.iql_update`` over
minibatches taken in order from one seeded shuffle (no reshuffle between passes), stopping after
``epochs`` passes or ``max_updates`` updates. The inference score is ``Q_target(s, a) − V(s)``.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import Tensor, nn

from .config import CriticConfig
from .iql import TwinLoss, iql_update
from .transitions import Transition, clean_text, critic_fields

log = logging.getLogger(__name__)

__all__ = ["META", "TOKENIZER", "WEIGHTS", "Critic", "CriticError", "FieldNet", "QNet", "TwinQ", "load_critic",
           "train_critic"]

WEIGHTS = "critic.pt"
"""The critic folder's weights (Q, target Q, V state dicts)."""
META = "critic.yaml"
"""The critic folder's record: encoder, sizes, fields, environment, config, training summary."""
TOKENIZER = "tokenizer.json"
"""The critic folder's vocabulary (``gru`` encoder only)."""
PAD, UNK = "<pad>", "<unk>"


class CriticError(FileNotFoundError):
    """A critic folder is missing or incomplete (the message names it and how to make one)."""


# ----------------------------------------------------------------------------------------- text tables

class TokenFeaturizer:
    """Texts → token ids for the GRU encoders (cleaned, the last ``max_tokens`` ids kept).

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` whose id 0 is ``<pad>`` and id 1 ``<unk>``.
        max_tokens: ids kept per text (the last ones); an empty text becomes ``[<unk>]``.
    """

    kind = "gru"

    def __init__(self, tokenizer: Any, max_tokens: int):
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.vocab_size = int(tokenizer.get_vocab_size())

    @classmethod
    def train(cls, texts: Sequence[str], vocab_size: int, max_tokens: int) -> TokenFeaturizer:
        """Train a unigram vocabulary of at most ``vocab_size`` pieces on ``texts`` (cleaned)."""
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=[PAD, UNK], unk_token=UNK,
                                          show_progress=False)
        tok.train_from_iterator([clean_text(t) for t in texts], trainer)
        return cls(tok, max_tokens)

    def table(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each (uncleaned) text: ``[n]`` lists of 1..max_tokens ids."""
        encs = self.tokenizer.encode_batch([clean_text(t) for t in texts])
        return [(e.ids[-self.max_tokens:] or [1]) for e in encs]

    @staticmethod
    def batch(table: list[list[int]], index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The rows ``index`` ``[N]`` as distinct padded texts plus a map back to the rows.

        Returns:
            ``(ids [U, L] long (0 = pad), lengths [U] long, inverse [N] long)``: the U distinct texts
            of the batch (each encoded once by the GRU; a batch repeats the task text and often
            the room text) and, per row, which of them it is.
        """
        uniq, inverse = torch.unique(index, return_inverse=True)
        rows = [table[i] for i in uniq.tolist()]
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        ids = torch.zeros((len(rows), int(lengths.max())), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        return ids, lengths, inverse


class EmbeddingFeaturizer:
    """Texts → frozen sentence embeddings (``memory.embedder``), cleaned first.

    Args:
        embedder: a ``TextEmbedder`` (``encode(texts) -> float32 [n, D]``).
        name: the embedder's config name (saved with the critic).
    """

    kind = "minilm"

    def __init__(self, embedder: Any, name: str):
        self.embedder = embedder
        self.name = name
        self.dim = int(embedder.dim)

    def table(self, texts: Sequence[str]) -> Tensor:
        """Embeddings ``[n, D]`` float32 of the texts."""
        if not texts:
            return torch.zeros((0, self.dim))
        return torch.from_numpy(np.asarray(self.embedder.encode([clean_text(t) for t in texts]), dtype=np.float32))

    @staticmethod
    def batch(table: Tensor, index: Tensor) -> Tensor:
        """Rows ``index`` of the embedding table: ``[N, D]``."""
        return table[index]


# ----------------------------------------------------------------------------------------- networks

class FieldNet(nn.Module):
    """A scalar head over F text fields: ``[N]`` values from F field inputs.

    ``gru``: field inputs are ``(ids [U, L], lengths [U], inverse [N])`` (``TokenFeaturizer.batch``:
    the U distinct texts and each row's text); one ``Embedding(vocab, E)`` (padding id 0) per
    network and one ``GRU(E → H)`` per field; the field feature is the GRU's last hidden state.
    ``minilm``: field inputs are ``[N, D]`` embeddings, concatenated. Head:
    ``Linear(in → H) → ReLU → Linear(H → 1)``.
    """

    def __init__(self, kind: str, n_fields: int, hidden: int, vocab: int = 0, emb: int = 0, dim: int = 0):
        super().__init__()
        self.kind = kind
        if kind == "gru":
            self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
            self.grus = nn.ModuleList(nn.GRU(emb, hidden, batch_first=True) for _ in range(n_fields))
            width = n_fields * hidden
        elif kind == "minilm":
            width = n_fields * dim
        else:
            raise ValueError(f"unknown critic encoder {kind!r}; use 'gru' or 'minilm'")
        self.head = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def features(self, fields: Sequence[Any]) -> Tensor:
        """Concatenated field features ``[N, F·H]`` (gru) or ``[N, F·D]`` (minilm)."""
        if self.kind == "minilm":
            return torch.cat(list(fields), dim=-1)
        feats = []
        for gru, (ids, lengths, inverse) in zip(self.grus, fields):
            x = self.embedding(ids)
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            _, h = gru(packed)
            feats.append(h[-1][inverse])
        return torch.cat(feats, dim=-1)

    def forward(self, fields: Sequence[Any]) -> Tensor:
        """Values ``[N]`` float32."""
        return self.head(self.features(fields)).squeeze(-1)


class QNet(nn.Module):
    """Q(s, a) = FieldNet(state fields + [action]) → ``[N]``."""

    def __init__(self, net: FieldNet):
        super().__init__()
        self.net = net

    def forward(self, s: Sequence[Any], a: Any) -> Tensor:
        """Q of each (state, action) pair, float32 ``[N]``: ``s`` the state fields' inputs, ``a`` the action's."""
        return self.net(list(s) + [a])


class VNet(nn.Module):
    """V(s) = FieldNet(state fields) → ``[N]``."""

    def __init__(self, net: FieldNet):
        super().__init__()
        self.net = net

    def forward(self, s: Sequence[Any]) -> Tensor:
        """V of each state, float32 ``[N]`` (``s``: the state fields' inputs)."""
        return self.net(list(s))


class TwinQ(nn.Module):
    """Two Q heads; ``forward`` = ``min(Q1, Q2)`` (the authors' ``DRRN_Q_web`` pair), ``each`` = both."""

    def __init__(self, q1: QNet, q2: QNet):
        super().__init__()
        self.q1, self.q2 = q1, q2

    def each(self, s: Sequence[Any], a: Any) -> list[Tensor]:
        """``[Q1(s, a), Q2(s, a)]``, each float32 ``[N]`` (``twin_loss: both`` regresses each)."""
        return [self.q1(s, a), self.q2(s, a)]

    def forward(self, s: Sequence[Any], a: Any) -> Tensor:
        """``min(Q1(s, a), Q2(s, a))``, float32 ``[N]``."""
        return torch.minimum(self.q1(s, a), self.q2(s, a))


def _make_nets(meta: dict[str, Any]) -> tuple[nn.Module, nn.Module]:
    kind, n = meta["encoder"], len(meta["fields"])
    kw = dict(hidden=meta["hidden"], vocab=meta.get("vocab", 0), emb=meta.get("embedding_dim", 0),
              dim=meta.get("dim", 0))
    q: nn.Module = QNet(FieldNet(kind, n + 1, **kw))
    if meta["twin_q"]:
        q = TwinQ(q, QNet(FieldNet(kind, n + 1, **kw)))
    return q, VNet(FieldNet(kind, n, **kw))


# ----------------------------------------------------------------------------------------- the critic

@dataclass
class Critic:
    """A trained critic: networks, featuriser and what it was trained on.

    Attributes:
        q, q_target, v: the Q network (used for training only), its Polyak copy, the value network.
        featurizer: ``TokenFeaturizer`` (gru) or ``EmbeddingFeaturizer`` (minilm).
        env: environment family the data came from; fields: the state fields read (``critic_fields``).
        meta: architecture, config and training summary (saved as ``critic.yaml``).
    """

    q: nn.Module
    q_target: nn.Module
    v: nn.Module
    featurizer: Any
    env: str
    fields: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def _inputs(self, states: Sequence[dict[str, str]], actions: Sequence[str] | None) -> tuple[list[Any], Any]:
        texts: list[str] = []
        for f in self.fields:
            texts.extend(str(s.get(f, "")) for s in states)
        if actions is not None:
            texts.extend(actions)
        uniq = list(dict.fromkeys(texts))
        pos = {t: i for i, t in enumerate(uniq)}
        table = self.featurizer.table(uniq)
        n = len(states)
        idx = torch.tensor([pos[t] for t in texts], dtype=torch.long)
        s = [self.featurizer.batch(table, idx[i * n:(i + 1) * n]) for i in range(len(self.fields))]
        a = self.featurizer.batch(table, idx[len(self.fields) * n:]) if actions is not None else None
        return s, a

    @torch.no_grad()
    def advantage(self, states: Sequence[dict[str, str]], actions: Sequence[str]) -> np.ndarray:
        """``Q_target(s, a) − V(s)`` of each (state, action) pair (docs/retrospex.md, 4. Rescoring at inference).

        Args:
            states: N dicts with the critic's state fields (uncleaned text; missing fields read as '').
            actions: N action texts.

        Returns:
            float64 ``[N]``.

        Raises:
            ValueError: ``states`` and ``actions`` differ in length.
        """
        if len(states) != len(actions):
            raise ValueError(f"{len(states)} states for {len(actions)} actions")
        if not actions:
            return np.zeros(0)
        self.q_target.eval()
        self.v.eval()
        s, a = self._inputs(states, list(actions))
        return (self.q_target(s, a) - self.v(s)).double().numpy()

    @torch.no_grad()
    def values(self, states: Sequence[dict[str, str]]) -> np.ndarray:
        """``V(s)`` of each state, float64 ``[N]``."""
        if not states:
            return np.zeros(0)
        self.v.eval()
        s, _ = self._inputs(states, None)
        return self.v(s).double().numpy()

    def save(self, folder: Path) -> Path:
        """Write ``critic.pt``, ``critic.yaml`` (and ``tokenizer.json`` for gru) into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"q": self.q.state_dict(), "q_target": self.q_target.state_dict(), "v": self.v.state_dict()},
                   folder / WEIGHTS)
        if isinstance(self.featurizer, TokenFeaturizer):
            (folder / TOKENIZER).write_text(self.featurizer.tokenizer.to_str())
        (folder / META).write_text(yaml.safe_dump(self.meta, sort_keys=False))
        return folder


def load_critic(folder: Path) -> Critic:
    """Load a critic written by ``Critic.save`` (``python -m experiments.retrospex critic``).

    Raises:
        CriticError: ``folder`` is not a critic folder.
    """
    folder = Path(folder)
    if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
        raise CriticError(f"{folder} is not a critic folder (no {META} / {WEIGHTS}); train one with "
                          "`python -m experiments.retrospex critic --data FILE --out DIR` or "
                          "`python -m experiments.retrospex pipeline`")
    meta = yaml.safe_load((folder / META).read_text())
    if meta["encoder"] == "gru":
        from tokenizers import Tokenizer

        featurizer: Any = TokenFeaturizer(Tokenizer.from_str((folder / TOKENIZER).read_text()), meta["max_tokens"])
    else:
        from empo2.memory.embedder import load_embedder

        featurizer = EmbeddingFeaturizer(load_embedder(meta["embedder"]), meta["embedder"])
    q, v = _make_nets(meta)
    state = torch.load(folder / WEIGHTS, weights_only=True)
    q.load_state_dict(state["q"])
    v.load_state_dict(state["v"])
    q_target = copy.deepcopy(q)
    q_target.load_state_dict(state["q_target"])
    return Critic(q, q_target, v, featurizer, meta["env"], tuple(meta["fields"]), meta)


# ----------------------------------------------------------------------------------------- training

def _featurizer(cfg: CriticConfig, texts: Sequence[str], embedder: Any = None) -> Any:
    if cfg.encoder == "gru":
        return TokenFeaturizer.train(texts, cfg.vocab_size, cfg.max_tokens)
    if embedder is None:
        from empo2.memory.embedder import load_embedder

        embedder = load_embedder(cfg.embedder)
    return EmbeddingFeaturizer(embedder, cfg.embedder)


def _featurize_texts(transitions: Sequence[Transition], states: list[dict[str, str]], nexts: list[dict[str, str]],
                     fields: Sequence[str], cfg: CriticConfig, embedder: Any) -> tuple[Any, Any, dict[str, int]]:
    """Featurise each distinct text once (the state and next-state fields, then the actions).

    Returns ``(featurizer, table of features, text -> row of the table)``.
    """
    texts: list[str] = []
    for f in fields:
        texts += [s[f] for s in states] + [s[f] for s in nexts]
    texts += [t.action for t in transitions]
    uniq = list(dict.fromkeys(texts))
    t0 = time.perf_counter()
    featurizer = _featurizer(cfg, uniq, embedder)
    table = featurizer.table(uniq)
    pos = {t: i for i, t in enumerate(uniq)}
    log.info("critic: %d transitions, %d distinct texts featurised (%s) in %.1f s", len(transitions), len(uniq),
             cfg.encoder, time.perf_counter() - t0)
    return featurizer, table, pos


def _index_transitions(transitions: Sequence[Transition], states: list[dict[str, str]], nexts: list[dict[str, str]],
                       fields: Sequence[str], pos: dict[str, int]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The transitions as table rows and targets: ``(states [T, F], next states [T, F], actions [T]`` (long),
    ``rewards [T], done [T])`` (float32), for T transitions and F fields."""
    idx_s = torch.tensor([[pos[s[f]] for f in fields] for s in states], dtype=torch.long)
    idx_n = torch.tensor([[pos[s[f]] for f in fields] for s in nexts], dtype=torch.long)
    idx_a = torch.tensor([pos[t.action] for t in transitions], dtype=torch.long)
    reward = torch.tensor([t.reward for t in transitions], dtype=torch.float32)
    done = torch.tensor([t.terminal for t in transitions], dtype=torch.float32)
    return idx_s, idx_n, idx_a, reward, done


def _critic_meta(cfg: CriticConfig, fields: Sequence[str], env: str, twin: bool, featurizer: Any,
                 n_transitions: int) -> dict[str, Any]:
    """The critic's ``critic.yaml`` record: encoder and network sizes (what ``_make_nets`` builds) and the config."""
    meta: dict[str, Any] = {
        "encoder": cfg.encoder, "fields": list(fields), "env": env, "twin_q": twin, "hidden": cfg.hidden,
        "embedding_dim": cfg.embedding_dim, "max_tokens": cfg.max_tokens,
        "vocab": getattr(featurizer, "vocab_size", 0), "dim": getattr(featurizer, "dim", 0),
        "embedder": cfg.embedder, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "transitions": n_transitions}
    return meta


def _train_iql(q: nn.Module, q_target: nn.Module, v: nn.Module, featurizer: Any, table: Any,
               data: tuple[Tensor, Tensor, Tensor, Tensor, Tensor], n_fields: int, cfg: CriticConfig,
               on_epoch: Callable[[int, dict[str, float]], None] | None) -> tuple[list[dict[str, float]], int]:
    """``cfg.epochs`` IQL passes over the shuffled transitions (at most ``cfg.max_updates`` updates in all).

    Returns ``(per-epoch metrics, updates)``; ``on_epoch(epoch, metrics)`` is called after each pass.
    """
    idx_s, idx_n, idx_a, reward, done = data
    opt_q = torch.optim.Adam(q.parameters(), lr=cfg.lr)
    opt_v = torch.optim.Adam(v.parameters(), lr=cfg.lr)
    order = torch.from_numpy(np.random.default_rng(cfg.seed).permutation(len(reward)))
    history: list[dict[str, float]] = []
    updates = 0
    for epoch in range(cfg.epochs):
        t_ep = time.perf_counter()
        sums: dict[str, float] = {}
        n_b = 0
        for start in range(0, len(order), cfg.batch):
            if cfg.max_updates and updates >= cfg.max_updates:
                break
            b = order[start:start + cfg.batch]
            s = [featurizer.batch(table, idx_s[b, i]) for i in range(n_fields)]
            sn = [featurizer.batch(table, idx_n[b, i]) for i in range(n_fields)]
            a = featurizer.batch(table, idx_a[b])
            m = iql_update(q, q_target, v, opt_q, opt_v, s=s, a=a, s_next=sn, reward=reward[b], done=done[b],
                           tau=cfg.tau, gamma=cfg.gamma, alpha=cfg.polyak_alpha, twin_loss=TwinLoss(cfg.twin_loss))
            for k, val in m.items():
                sums[k] = sums.get(k, 0.0) + val
            n_b += 1
            updates += 1
        if n_b == 0:
            break
        row = {f"critic/{k}": val / n_b for k, val in sums.items()}
        row.update({"critic/updates": float(updates), "time/epoch": time.perf_counter() - t_ep})
        history.append(row)
        if on_epoch is not None:
            on_epoch(epoch + 1, row)
    return history, updates


def train_critic(transitions: Sequence[Transition], cfg: CriticConfig, env: str, embedder: Any = None,
                 on_epoch: Callable[[int, dict[str, float]], None] | None = None
                 ) -> tuple[Critic, list[dict[str, float]]]:
    """Train Q, V and the target Q offline with IQL (docs/retrospex.md, 3. The critic) on ``transitions``.

    Args:
        transitions: the critic data (``transitions.transitions_from_records``).
        cfg: encoder, sizes and IQL hyper-parameters.
        env: environment family of the data (fields; twin Q on WebShop with ``twin_q: auto``).
        embedder: for ``minilm``, an already loaded ``TextEmbedder`` (default: ``load_embedder(cfg.embedder)``).
        on_epoch: callback ``(epoch, metrics)`` after each pass.

    Returns:
        ``(critic, per-epoch metrics)``; metrics keys ``critic/loss_v``, ``critic/loss_q``,
        ``critic/q_mean``, ``critic/v_mean``, ``critic/adv_mean`` (means over the pass),
        ``critic/updates`` and ``time/epoch``.

    Raises:
        ValueError: no transitions.
    """
    if not transitions:
        raise ValueError("no transitions to train the critic on (did the rollouts produce any steps?)")
    fields = critic_fields(env)
    twin = cfg.twin_q == "on" or (cfg.twin_q == "auto" and env == "webshop")
    torch.manual_seed(cfg.seed)
    states = [t.state() for t in transitions]
    nexts = [t.next_state() for t in transitions]
    featurizer, table, pos = _featurize_texts(transitions, states, nexts, fields, cfg, embedder)
    data = _index_transitions(transitions, states, nexts, fields, pos)
    meta = _critic_meta(cfg, fields, env, twin, featurizer, len(transitions))
    q, v = _make_nets(meta)
    q_target = copy.deepcopy(q)
    for p in q_target.parameters():
        p.requires_grad_(False)
    history, updates = _train_iql(q, q_target, v, featurizer, table, data, len(fields), cfg, on_epoch)
    meta["updates"] = updates
    meta["final"] = history[-1] if history else {}
    q.eval()
    v.eval()
    return Critic(q, q_target, v, featurizer, env, fields, json.loads(json.dumps(meta, default=float))), history
