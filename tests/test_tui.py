"""The chat app, driven with Pilot on the deterministic fake engine; one smoke test on a real small GGUF."""

from __future__ import annotations

import json
import threading
import time

import pytest
from textual.widgets import Input, Select

from relaxtui.decoding.events import Verdict
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, FakeChatEngine
from relaxtui.tui.widgets.inspector import InspectorPanel, describe
from relaxtui.tui.widgets.stats import StatsPanel
from relaxtui.tui.widgets.transcript import TokenView

SIZE = (100, 32)


def fake_app(tmp_path=None, **engine_kwargs) -> RelaxApp:
    settings = ChatSettings(rule="strict", drafter="fake-drafter", max_tokens=40, seed=3)
    return RelaxApp(FakeChatEngine(**engine_kwargs), settings, save_dir=tmp_path)


DEADLINE_S = 120.0  # generous: a loaded 2-core machine is slow, but a real hang still fails


async def wait_until(pilot, condition, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``condition`` between event-loop turns until it holds; fail only after a generous deadline, so
    the outcome never depends on how fast the machine is."""
    ends = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > ends:
            raise AssertionError(f"condition not reached within {deadline_s:.0f} s")
        await pilot.pause(0.01)


async def send(pilot, app: RelaxApp, text: str = "hello") -> None:
    await wait_until(pilot, lambda: app.ready)
    await pilot.click("#prompt")
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)


async def test_send_shows_tokens_with_their_verdict_styles():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        assert len(app.events) == app.last_metrics.output_tokens == 40
        verdicts = {e.verdict for e in app.events}
        assert {Verdict.ACCEPTED, Verdict.RESAMPLED} <= verdicts
        view = app.query(TokenView).last()
        rendered = view.render()
        styles = {v: view.get_component_rich_style(f"token--{v.value}", partial=True) for v in Verdict}
        assert len(rendered.spans) == len(app.events)
        for span, event in zip(rendered.spans, app.events, strict=True):
            assert span.style.color == styles[event.verdict].color, event.verdict
        assert styles[Verdict.ACCEPTED].color != styles[Verdict.RESAMPLED].color
        assert app.conversation[-1].role == "assistant" and app.conversation[-1].content


async def test_stats_follow_the_stream():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        stats = app.query_one(StatsPanel)
        m = app.last_metrics
        assert stats.counters.rounds == m.rounds and stats.counters.accepted == m.accepted
        text = "\n".join(stats.lines())
        assert f"accept {m.acceptance_rate:.2f} ({m.accepted}/{m.drafted})" in text
        assert f"{m.tokens_per_s:.1f} tok/s  c_rel 0.30" in text


def gated_app(gate: threading.Event, **settings) -> RelaxApp:
    """A reply that holds at its 30th verifier row until ``gate`` is set: "during a reply", deterministically
    (each row emits at most one token, so 120 tokens always reach the gate; shorter replies keep the file fast
    on a loaded machine)."""
    chosen = {"rule": "strict", "drafter": "fake-drafter", "max_tokens": 120, "seed": 3, **settings}
    return RelaxApp(FakeChatEngine(gate=gate, gate_after=30), ChatSettings(**chosen))


async def start_reply(pilot, app: RelaxApp, text: str = "go") -> None:
    await wait_until(pilot, lambda: app.ready)
    await pilot.click("#prompt")
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: len(app.events) >= 5)


async def test_stop_ends_generation_mid_stream():
    gate = threading.Event()
    app = gated_app(gate)
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot, app)
        await pilot.press("escape")
        gate.set()
        await wait_until(pilot, lambda: not app.generating)
        assert app.last_metrics.finish_reason == "stopped"
        assert 5 <= len(app.events) == app.last_metrics.output_tokens < 400
        await pilot.press(*"again", "enter")  # still usable afterwards
        await wait_until(pilot, lambda: len(app.conversation) == 4)
        assert app.last_metrics.finish_reason == "max_tokens"


async def test_quit_during_a_reply_stops_and_waits_for_the_worker():
    gate = threading.Event()
    app = gated_app(gate)
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot, app)
        worker = app._reply_worker
        assert worker is not None and not worker.is_finished  # held at the gate: mid-reply
        threading.Timer(0.3, gate.set).start()  # the decode in flight returns, then the loop sees the stop
        await pilot.press("ctrl+q")
    assert worker.is_finished  # quit waited for it...
    assert app.engine.lock.acquire(blocking=False)  # ...so the models are free to be closed
    assert len(app.events) < 400


async def test_new_chat_during_a_reply_leaves_nothing_of_the_old_one():
    gate = threading.Event()
    app = gated_app(gate)
    async with app.run_test(size=SIZE) as pilot:
        await start_reply(pilot, app)
        old_worker = app._reply_worker
        await pilot.press("ctrl+n")
        gate.set()
        await wait_until(pilot, lambda: old_worker.is_finished)
        await pilot.pause()
        stats = app.query_one(StatsPanel)
        assert not app.events and not app.conversation and not list(app.query(TokenView))
        assert (stats.tokens, stats.counters.rounds, stats.counters.drafted) == (0, 0, 0)
        assert app.last_metrics is None and not app.generating
        await pilot.press(*"fresh", "enter")  # the new chat works, with only its own reply
        await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
        assert len(app.events) == app.last_metrics.output_tokens == stats.tokens
        assert [m.role for m in app.conversation] == ["user", "assistant"]


async def test_messages_of_an_old_reply_or_after_quit_are_ignored():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        count, old = len(app.events), app.generation
        stale = app.events[:3]
        app.post_message(RelaxApp.TokensReceived(old - 1, tuple(stale)))
        app.post_message(RelaxApp.GenerationFailed(old - 1, "late failure"))
        await pilot.pause()
        assert len(app.events) == count and not app._notifications
        app._quitting = True  # what quit sets before the screen goes away
        app.post_message(RelaxApp.TokensReceived(old, tuple(stale)))
        await pilot.pause()
        assert len(app.events) == count


async def test_settings_are_validated():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        await pilot.press("f2")
        await wait_until(pilot, lambda: bool(app.query("#set-rule")))
        app.query_one("#set-rule", Select).value = "mentored"
        knob = app.query_one("#set-knob", Input)
        await wait_until(pilot, lambda: knob.value == "0.3")  # the rule's first paper-grid knob is suggested

        def notified(text: str) -> bool:
            return any(text in n.message for n in app._notifications)

        knob.value = "1.5"
        await pilot.click("#set-apply")
        await wait_until(pilot, lambda: notified("out of range for 'mentored'"))
        assert app.settings.rule == "strict"
        knob.value = "0.7"
        app.query_one("#set-draft-max", Input).value = "x"
        knob.focus()
        await pilot.press("enter")  # submitting any field applies, like the button
        await wait_until(pilot, lambda: notified("draft length must be a whole number"))
        app.query_one("#set-draft-max", Input).value = "4"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.settings.rule == "mentored")
        assert (app.settings.rule, app.settings.knob, app.settings.draft_max) == ("mentored", 0.7, 4)


async def test_inspector_shows_the_selected_token():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        await pilot.press("tab")  # focus the transcript
        await pilot.press("home", "right", "right")
        assert app.selected == 2
        event = app.events[2]
        body = str(app.query_one(InspectorPanel).query_one("#inspector-body").render())
        assert f"verdict   {event.verdict.value}" in body
        assert f"p(x)      {event.p_x:.4f}" in body and f"π(x)      {event.pi_x:.4f}" in body
        rejected = next(i for i, e in enumerate(app.events) if e.verdict is Verdict.RESAMPLED)
        app.query(TokenView).last().action_click_token(rejected)  # what a mouse click on the token runs
        await pilot.pause()
        body = str(app.query_one(InspectorPanel).query_one("#inspector-body").render())
        assert app.selected == rejected and "rejected  " in body and "accept_prob" in body


def test_describe_lists_alternatives_and_statistic():
    app_engine = FakeChatEngine()
    rule, config = ChatSettings(rule="cactus", knob=1.0, drafter="fake-drafter").validated()
    events = list(app_engine.stream([], ChatSettings(rule="cactus", knob=1.0, max_tokens=6), lambda: False))
    drafted = next(e for e in events[:-1] if e.verdict in (Verdict.ACCEPTED, Verdict.RESAMPLED))
    text = describe(drafted, app_engine.piece)
    assert "gamma" in text and "top p:" in text and "top q:" in text


async def test_save_writes_markdown_and_events(tmp_path):
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "save me")
        await pilot.press("ctrl+s")
        await pilot.pause()
    markdown = next(tmp_path.glob("chat-*.md")).read_text()
    assert "## user" in markdown and "save me" in markdown and "## assistant" in markdown
    lines = [json.loads(line) for line in next(tmp_path.glob("chat-*.jsonl")).read_text().splitlines()]
    assert lines[0]["type"] == "settings" and len(lines) == 1 + len(app.events)
    assert {line["verdict"] for line in lines[1:]} <= {v.value for v in Verdict}


async def test_new_chat_clears_everything():
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not app.events and not app.conversation and not list(app.query(TokenView))


async def test_model_load_failure_is_a_notification_and_the_app_stays_up(tmp_path):
    from relaxtui.session import ModelOptions
    from relaxtui.tui.engine import LlamaChatEngine

    app = RelaxApp(LlamaChatEngine(ModelOptions(str(tmp_path / "missing.gguf"), None)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(app._notifications))
        notes = [n.message for n in app._notifications]
        assert any("model file not found" in n for n in notes)
        assert app.query_one("#prompt", Input).disabled and app.is_running
        await pilot.press("f3")  # still responds to keys
        assert app.query_one(StatsPanel).has_class("-hidden")


async def test_context_exhausted_is_reported():
    app = fake_app(n_ctx=20)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        assert app.last_metrics.finish_reason == "context"
        assert any("context window is full" in n.message for n in app._notifications)


# -- snapshots (pytest-textual-snapshot) ------------------------------------------------------------------------
def _run_before(*keys):
    async def run_before(pilot) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: app.ready)
        await pilot.click("#prompt")
        await pilot.press(*"tell me about cats", "enter")
        await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
        app.query_one("#prompt", Input).cursor_blink = False  # a blinking cursor makes snapshots flaky
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
    return run_before


def test_snapshot_main_screen(snap_compare):
    assert snap_compare(fake_app(), terminal_size=(100, 32), run_before=_run_before())


def test_snapshot_inspector_on_a_rejected_token(snap_compare):
    async def select_rejected(pilot) -> None:
        await _run_before()(pilot)
        app = pilot.app
        rejected = next(i for i, e in enumerate(app.events) if e.verdict is Verdict.RESAMPLED)
        app.select(rejected)
        await pilot.pause()

    assert snap_compare(fake_app(), terminal_size=(100, 32), run_before=select_rejected)


def test_snapshot_fits_80_by_24(snap_compare):
    assert snap_compare(fake_app(), terminal_size=(80, 24), run_before=_run_before())


# -- real model -------------------------------------------------------------------------------------------------
@pytest.mark.model
async def test_real_model_smoke(test_model_path):
    from relaxtui.session import ModelOptions
    from relaxtui.tui.engine import LlamaChatEngine

    engine = LlamaChatEngine(ModelOptions(str(test_model_path), str(test_model_path), ctx_size=512))
    app = RelaxApp(engine, ChatSettings(drafter=str(test_model_path), max_tokens=24, temperature=0.0))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.ready)
            await pilot.click("#prompt")
            await pilot.press(*"Say hi", "enter")
            await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
            assert app.events and app.last_metrics.drafted > 0
            assert app.last_metrics.acceptance_rate > 0.9  # the model drafting for itself
            assert app.query(TokenView).last().render().plain.strip()
    finally:
        engine.close()


async def test_thinking_tokens_go_to_a_collapsed_block():
    from textual.app import App

    from relaxtui.decoding.events import RoundTiming, TokenEvent
    from relaxtui.tui.widgets.transcript import AssistantMessage

    timing = RoundTiming(0, 0, 0, 0.0, 0.0, 0.0, 0.0)

    def token(index, text):
        return TokenEvent(index, index, text, Verdict.VERIFIER, 0, 0.5, None, 0.5, None, (), None, timing)

    class Host(App):
        def compose(self):
            yield AssistantMessage()

    async with Host().run_test() as pilot:
        reply = pilot.app.query_one(AssistantMessage)
        assert reply.thinking.has_class("-empty")
        for i, text in enumerate(["<think>", "let me", " think", "</think>", "The answer", " is 4"]):
            reply.add(i, token(i, text))
        await pilot.pause()
        assert [e.text for _, e in reply.thinking_view.tokens] == ["<think>", "let me", " think", "</think>"]
        assert reply.answer_view.plain() == "The answer is 4"
        assert not reply.thinking.has_class("-empty") and reply.thinking.collapsed


# -- rendering cost: batched messages, bounded segments -----------------------------------------------------------
def _event(index: int, round_index: int, n_accepted: int, text: str = "x"):
    from relaxtui.decoding.events import RoundTiming, TokenEvent

    timing = RoundTiming(round_index, n_accepted + 1, n_accepted, 0.0, 0.0, 0.0, 0.0)
    return TokenEvent(index, index, text, Verdict.ACCEPTED, 1, 0.5, 0.5, 0.5, 1.0, (), None, timing)


def test_token_batches_release_each_round_as_soon_as_it_is_complete():
    from relaxtui.decoding.events import Finished
    from relaxtui.tui.app import token_batches

    released_after = []
    # rounds of 3, 1 and 2 tokens, then an end-of-generation that cut a round short after one token
    events = [_event(0, 0, 2), _event(1, 0, 2), _event(2, 0, 2), _event(3, 1, 0), _event(4, 2, 1), _event(5, 2, 1),
              _event(6, 3, 3)]

    def stream():
        for event in events:
            released_after.append(event.index)
            yield event
        yield Finished("", None)

    batches = []
    for batch in token_batches(stream()):
        batches.append(batch)
        if not isinstance(batch, Finished):
            assert released_after[-1] == batch[-1].index  # released before the next round is even asked for
    assert [[e.index for e in b] for b in batches[:-1]] == [[0, 1, 2], [3], [4, 5], [6]]
    assert isinstance(batches[-1], Finished)


async def test_long_reply_is_streamed_in_batches_into_bounded_segments():
    from relaxtui.tui.widgets.transcript import SEGMENT_TOKENS

    received = []

    def hook(message) -> None:
        if isinstance(message, RelaxApp.TokensReceived):
            received.append(len(message.events))

    app = RelaxApp(FakeChatEngine(), ChatSettings(rule="strict", drafter="fake-drafter", max_tokens=1500, seed=3))
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await send(pilot, app)
        metrics = app.last_metrics
        assert sum(received) == len(app.events) == metrics.output_tokens == 1500
        assert len(received) <= metrics.rounds  # at most one UI message per round
        segments = list(app.query(TokenView))
        assert len(segments) > 1500 // (4 * SEGMENT_TOKENS)
        assert all(segment.sealed for segment in segments[:-1])  # finished segments are never re-rendered
        assert [t for segment in segments for t in segment.tokens] == list(enumerate(app.events))
        app.select(5)  # selection re-renders only the segment that holds the token
        await pilot.pause()
        assert [segment.selected for segment in segments[:2]] == [5, None]
