"""Chat prompts built as token segments: system + few-shot turns + the episode's turns.

Layout of an episode (each bracket is one ``Segment``; see ``empo2.records``)::

    [TEMPLATE: system msg + few-shot example turns]
    [TEMPLATE: <user>] [OBS: task + first observation] ([TIP: <tip> block </tip>]) [TEMPLATE: </user><assistant>]
    [ACTION: sampled ids] [TEMPLATE: </assistant>]
    [TEMPLATE: <user>] [OBS: observation] ([TIP]) [TEMPLATE: </user><assistant>] [ACTION] ...

Tips are their own segments, inserted between the observation and the closing markup of the
step's user message (docs/algorithms.md, EMPO² memory at run time); earlier steps keep the tips they had. Dropping every TIP segment
gives exactly the ids the same episode would have had without tips (tested), which is what the
off-policy update trains on (docs/algorithms.md, Modes).
"""

from __future__ import annotations

from empo2.policy.chat import ChatFormat
from empo2.policy.sampling import Generation
from empo2.records import Segment, SegmentKind

TIP_HEADER = "Here are some memories you collected in your previous exploration:"


def tip_block(tips: list[str]) -> str:
    """The text of a tip segment: ``\\n\\n<tip> header\\n- tip\\n…\\n</tip>`` ('' for no tips)."""
    if not tips:
        return ""
    body = "\n".join(f"- {t}" for t in tips)
    return f"\n\n<tip> {TIP_HEADER}\n{body}\n</tip>"


def first_user_text(task_description: str, observation: str) -> str:
    """Content of the first user turn: the task, then the first observation."""
    return f"Task: {task_description.strip()}\n\nObservation: {observation.strip()}"


def later_user_text(observation: str) -> str:
    """Content of a later user turn."""
    return f"Observation: {observation.strip()}"


def user_text(task_description: str, observation: str, turn: int) -> str:
    """Content of the user turn of ``turn`` (0-based): ``first_user_text`` at turn 0, else ``later_user_text``."""
    return first_user_text(task_description, observation) if turn == 0 else later_user_text(observation)


class EpisodeChat:
    """The growing chat of one episode, kept as token segments and as plain messages.

    Args:
        fmt: the model's chat markup.
        system: system message text (role + action grammar).
        few_shot: example (user, assistant) turns placed before the episode.

    Attributes:
        segments: the segments so far (model order).
        messages: ``(role, content)`` of the episode turns without tips (memory key text).
    """

    def __init__(self, fmt: ChatFormat, system: str, few_shot: list[tuple[str, str]] | None = None):
        self.fmt = fmt
        pre = fmt.open("system") + fmt.encode(system) + fmt.close("system")
        for u, a in few_shot or []:
            pre += fmt.open("user") + fmt.encode(u) + fmt.close("user")
            pre += fmt.open("assistant") + fmt.encode(a) + fmt.close("assistant")
        self.segments: list[Segment] = [Segment(SegmentKind.TEMPLATE, pre)]
        self.messages: list[tuple[str, str]] = []
        self._ids: list[int] = list(pre)

    def _push(self, seg: Segment) -> None:
        if seg.ids:
            self.segments.append(seg)
            self._ids.extend(seg.ids)

    def add_user(self, text: str, step: int, tips: list[str] | None = None, tip_ids: list[int] | None = None) -> None:
        """Append a user turn (observation + optional tip block) and open the assistant turn.

        ``tip_ids`` (already-budgeted ids of the tip block) wins over ``tips`` when given.
        """
        self._push(Segment(SegmentKind.TEMPLATE, self.fmt.open("user"), step=step))
        self._push(Segment(SegmentKind.OBS, self.fmt.encode(text), step=step))
        ids = tip_ids if tip_ids is not None else self.fmt.encode(tip_block(tips or []))
        self._push(Segment(SegmentKind.TIP, list(ids), step=step))
        self._push(Segment(SegmentKind.TEMPLATE, self.fmt.close("user") + self.fmt.open("assistant"), step=step))
        self.messages.append(("user", text))

    def add_action(self, gen: Generation, text: str, step: int) -> None:
        """Append the sampled action ids (with behaviour log-probs) and close the turn."""
        self._push(Segment(SegmentKind.ACTION, list(gen.ids), list(gen.logps),
                           [list(a) for a in gen.allowed] if gen.allowed is not None else None, step=step))
        self._push(Segment(SegmentKind.TEMPLATE, self.fmt.close_after_action(gen.ids), step=step))
        self.messages.append(("assistant", text))

    def prompt_ids(self) -> list[int]:
        """All ids so far (with tips): what the model is conditioned on for the next action."""
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def drop_open_turn(self, step: int) -> None:
        """Remove the trailing segments of turn ``step`` (a user turn that got no action, e.g. because
        the prompt no longer fits the context); its plain message stays in ``messages``."""
        while self.segments and self.segments[-1].step == step:
            seg = self.segments.pop()
            del self._ids[len(self._ids) - len(seg.ids):]
