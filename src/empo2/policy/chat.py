"""Chat-template markup as separate token segments (DESIGN.md, "the token contract").

We never tokenise a whole rendered chat. Instead the role markup of the model's chat template
(e.g. ChatML ``<|im_start|>user\\n`` … ``<|im_end|>\\n``) is derived once by rendering the
template around a sentinel, and every piece (markup, observation, tip, action) is tokenised on
its own. The model sees exactly the concatenation of these pieces, in sampling and in training,
so removing a tip segment gives exactly the ids of the same chat built without the tip.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_SENTINEL = "\u2063SENTINEL\u2063"


@dataclass(frozen=True)
class RoleMarkup:
    """Text before/after a message's content for one role."""

    prefix: str
    suffix: str


class ChatFormat:
    """Token-level chat markup for a tokenizer.

    Attributes:
        tokenizer: the Hugging Face tokenizer.
        markup: role → ``RoleMarkup`` (system, user, assistant).
        generation_prompt: text that opens the assistant turn (e.g. ``<|im_start|>assistant\\n``).
        eos_ids: token ids that end a turn (``eos_token_id`` and the template's end-of-turn token).
        newline_ids: token ids whose text contains a newline (a one-line action stops there).
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.markup = {role: self._derive(role) for role in ("system", "user", "assistant")}
        self.generation_prompt = self.markup["assistant"].prefix
        eos = set()
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        end = self.markup["assistant"].suffix.strip()
        if end:
            ids = self.encode(end)
            if len(ids) == 1:
                eos.add(ids[0])
        self.eos_ids = frozenset(eos)
        self.newline_ids = frozenset(self._newline_ids())

    def _derive(self, role: str) -> RoleMarkup:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            msgs = [{"role": "system", "content": "S"}] if role != "system" else []
            base = tok.apply_chat_template(msgs, tokenize=False) if msgs else ""
            full = tok.apply_chat_template(msgs + [{"role": role, "content": _SENTINEL}], tokenize=False)
            if full.startswith(base) and _SENTINEL in full:
                piece = full[len(base):]
                pre, post = piece.split(_SENTINEL, 1)
                return RoleMarkup(pre, post)
        return RoleMarkup(f"<|im_start|>{role}\n", "<|im_end|>\n")  # ChatML fallback

    def _newline_ids(self) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        out = []
        for tok_str, idx in vocab.items():
            text = self.tokenizer.convert_tokens_to_string([tok_str])
            if "\n" in text:
                out.append(idx)
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` (special tokens kept out)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def open(self, role: str) -> list[int]:
        """Ids of the markup opening a ``role`` message."""
        return _cached_encode(self, self.markup[role].prefix)

    def close(self, role: str) -> list[int]:
        """Ids of the markup closing a ``role`` message."""
        return _cached_encode(self, self.markup[role].suffix)

    def close_after_action(self, action_ids: list[int]) -> list[int]:
        """Markup closing an assistant turn whose sampled ids are ``action_ids``.

        If the model itself emitted the end-of-turn token, only the rest of the suffix is added,
        so the sequence never holds two end-of-turn tokens.
        """
        suffix = self.close("assistant")
        if action_ids and suffix and action_ids[-1] == suffix[0]:
            return suffix[1:]
        if action_ids and action_ids[-1] in self.eos_ids and suffix and suffix[0] in self.eos_ids:
            return suffix[1:]
        return suffix

    def vocab_size(self) -> int:
        return len(self.tokenizer)


@lru_cache(maxsize=4096)
def _cached_encode_inner(tok_id: int, text: str, fmt: ChatFormat) -> tuple[int, ...]:
    return tuple(fmt.encode(text))


def _cached_encode(fmt: ChatFormat, text: str) -> list[int]:
    return list(_cached_encode_inner(id(fmt.tokenizer), text, fmt))
