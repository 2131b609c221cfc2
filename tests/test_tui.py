"""The chat app, driven with Pilot on the deterministic fake engine; one smoke test on a real small GGUF."""

from __future__ import annotations

import json

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


async def wait_until(pilot, condition, steps: int = 200) -> None:
    for _ in range(steps):
        await pilot.pause(0.02)
        if condition():
            return
    raise AssertionError("condition not reached")


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


async def test_stop_ends_generation_mid_stream():
    app = fake_app(delay_s=0.01)
    app.settings = ChatSettings(rule="strict", drafter="fake-drafter", max_tokens=400)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        await pilot.click("#prompt")
        await pilot.press(*"go", "enter")
        await wait_until(pilot, lambda: len(app.events) >= 5)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating)
        assert app.last_metrics.finish_reason == "stopped"
        assert 5 <= len(app.events) < 400
        await pilot.press(*"again", "enter")  # still usable afterwards
        await wait_until(pilot, lambda: len(app.conversation) == 4 or not app.generating)


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
            await wait_until(pilot, lambda: app.ready, steps=1500)
            await pilot.click("#prompt")
            await pilot.press(*"Say hi", "enter")
            await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating, steps=1500)
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
        assert reply.answer_view.render().plain == "The answer is 4"
        assert not reply.thinking.has_class("-empty") and reply.thinking.collapsed
