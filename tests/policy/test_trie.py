from __future__ import annotations

import pytest
import torch

from empo2.policy.sampling import row_generator, sample
from empo2.policy.trie import TokenTrie


def test_trie_allowed_sets():
    t = TokenTrie([[1, 2], [1, 3], [4]], end_id=9)
    assert t.allowed([]) == [1, 4]
    assert t.allowed([1]) == [2, 3]
    assert t.allowed([1, 2]) == [9]
    assert t.allowed([4]) == [9]
    assert t.allowed([5]) == []
    with pytest.raises(ValueError):
        TokenTrie([[]], end_id=9)


def test_constrained_sampling_stays_in_trie_and_renormalises(chat_format):
    from tests.fakes import BigramLM

    tok = chat_format.tokenizer
    actions = ["go east", "go west", "take key"]
    seqs = [chat_format.encode(a) for a in actions]
    eos = min(chat_format.eos_ids)
    trie = TokenTrie(seqs, eos)
    model = BigramLM(len(tok), seed=1)
    prompt = chat_format.open("assistant")
    seen = set()
    for k in range(12):
        (g,) = sample(model, [prompt], max_new_tokens=8, temperature=3.0, eos_ids=chat_format.eos_ids,
                      generators=[row_generator(0, k)], tries=[trie])
        assert g.ids[-1] == eos
        assert g.ids[:-1] in seqs
        seen.add(chat_format.decode(g.ids))
        # each log-prob is that of the distribution renormalised over the allowed ids
        ctx = prompt[-1]
        for tokid, lp, allowed in zip(g.ids, g.logps, g.allowed):
            row = model.row(torch.tensor(ctx))
            expect = torch.log_softmax(row.detach()[allowed] / 3.0, -1)[allowed.index(tokid)]
            assert abs(lp - float(expect)) < 1e-5
            ctx = tokid
    assert len(seen) >= 2
