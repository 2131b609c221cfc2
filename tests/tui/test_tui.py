"""The chat app, driven with Pilot on the deterministic fake engine; one smoke test on a real small GGUF."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Input, Select

from relaxtui.decoding.events import Verdict
from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, FakeChatEngine
from relaxtui.tui.widgets.inspector import InspectorPanel, describe
from relaxtui.tui.widgets.stats import StatsPanel
from relaxtui.tui.widgets.transcript import TokenView
from tests.support.pilot import SIZE, send, wait_until


def fake_app(tmp_path=None, **engine_kwargs) -> RelaxApp:
    settings = ChatSettings(rule="strict", drafter="fake-drafter", max_tokens=40, seed=3)
    return RelaxApp(FakeChatEngine(**engine_kwargs), settings, save_dir=tmp_path)


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
        assert f"acceptance     {m.acceptance_rate:.2f} ({m.accepted}/{m.drafted})" in text
        assert f"speed          {m.tokens_per_s:.1f} tok/s" in text
        assert "verifier alone 100.0 tok/s" in text and "c_rel          0.30" in text  # the fake's timed costs
        wall_clock = m.tokens_per_s * 0.01  # over the verifier alone's 100 tok/s
        assert f"wall-clock            {wall_clock:.2f}x" in text and "priced (this machine) " in text


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
        await wait_until(pilot, lambda: notified("knob 1.5 is out of range for 'mentored'"))
        assert app.settings.rule == "strict"
        knob.value = "0.7"
        app.query_one("#set-draft-max", Input).value = "x"
        knob.focus()
        await pilot.press("enter")  # submitting any field applies, like the button
        await wait_until(pilot, lambda: notified("draft length N must be a whole number (got 'x')"))
        app.query_one("#set-draft-max", Input).value = "4"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.settings.rule == "mentored")
        assert (app.settings.rule, app.settings.knob, app.settings.draft_max) == ("mentored", 0.7, 4)


async def test_a_rule_with_a_second_knob_opens_in_the_panel_and_applies_unchanged():
    # `chat --rule topk-delta:0.5:15` stores topk-delta[k=15]: F2 raised InvalidSelectValueError on it
    app = RelaxApp(FakeChatEngine(), ChatSettings(rule="topk-delta[k=15]", knob=0.5, drafter="fake-drafter",
                                                  max_tokens=40, seed=3))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        await pilot.press("f2")
        await wait_until(pilot, lambda: bool(app.query("#set-rule")))
        assert app.query_one("#set-rule", Select).value == "topk-delta[k=15]"
        assert str(app.query_one("#set-knob-label").render()) == "knob (delta)"
        app.query_one("#set-knob", Input).value = "0.25"
        await pilot.click("#set-apply")
        await wait_until(pilot, lambda: app.settings.knob == 0.25)
        assert app.settings.rule == "topk-delta[k=15]"


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


async def test_save_writes_markdown_and_a_chat_file(tmp_path):
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "save me")
        await pilot.press("ctrl+s")
        await pilot.pause()
    markdown = next(tmp_path.glob("chat-*.md")).read_text()
    assert "## user" in markdown and "save me" in markdown and "## assistant" in markdown
    document = json.loads(next(tmp_path.glob("chat-*.json")).read_text())
    assert (document["format"], document["version"]) == ("relaxtui-chat", 1)
    assert document["models"]["verifier"]["name"] == "fake-verifier"
    assert document["models"]["drafter"] == {"name": "fake-drafter", "path": None, "kind": "model"}
    assert document["settings"]["rule"] == "strict" and document["settings"]["seed"] == 3
    user, reply = document["messages"]
    assert user == {"role": "user", "content": "save me"}
    assert reply["role"] == "assistant" and len(reply["events"]) == len(app.events)
    assert {event["verdict"] for event in reply["events"]} <= {v.value for v in Verdict}
    assert reply["metrics"]["output_tokens"] == len(app.events) and reply["settings"]["max_tokens"] == 40


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


def test_snapshot_settings_at_80_by_24(snap_compare):
    assert snap_compare(fake_app(), terminal_size=(80, 24), run_before=_run_before("f2"))


def test_snapshot_empty_chat_statistics(snap_compare):
    async def loaded(pilot) -> None:
        await wait_until(pilot, lambda: pilot.app.ready)
        pilot.app.query_one("#prompt", Input).cursor_blink = False
        await pilot.pause()

    assert snap_compare(fake_app(), terminal_size=(80, 24), run_before=loaded)


# -- real model -------------------------------------------------------------------------------------------------
@pytest.mark.model
async def test_real_model_smoke(test_model_path):
    from relaxtui.session import ModelOptions
    from relaxtui.tui.engine import LlamaChatEngine

    # one thread: under other busy processes llama.cpp's default threads spin (its calibration took 3 min, 5 s alone)
    engine = LlamaChatEngine(ModelOptions(str(test_model_path), str(test_model_path), ctx_size=512, threads=1))
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


# -- settings panel at 80×24: labelled, keyboard-driven, never squeezing the transcript ---------------------------
SMALL = (80, 24)
FIELD_LABELS = {"set-rule": "rule", "set-knob": "knob", "set-draft-max": "draft length N", "set-temperature":
                "temperature", "set-top-k": "top-k", "set-top-p": "top-p", "set-seed": "seed",
                "set-max-tokens": "max tokens", "set-drafter": "drafter", "set-thinking": "thinking",
                "set-relax-scope": "relax scope"}


async def open_settings(pilot, app: RelaxApp) -> None:
    await wait_until(pilot, lambda: app.ready)
    await pilot.press("f2")
    await pilot.pause()
    assert app.query_one("#settings").display and app.focused is app.query_one("#set-rule")


def typed_into_prompt(app: RelaxApp) -> str:
    return app.query_one("#prompt", Input).value


async def test_settings_fields_are_labelled_and_fit_80_by_24():
    from textual.widgets import Label

    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await send(pilot, app)
        await open_settings(pilot, app)
        for field_id, label in FIELD_LABELS.items():
            row = app.query_one(f"#{field_id}").parent
            text = str(row.query_one(".label", Label).render())
            assert text.startswith(label), (field_id, text)  # the label sits beside its box, in the same row
            assert app.query_one(f"#{field_id}").region.width >= 10
        apply = app.query_one("#set-apply")
        assert app.screen.region.contains_region(apply.region) and apply.region.height >= 1
        assert app.query_one("#transcript").region.width >= 40  # the panel lies over the sidebar, not the chat


async def test_settings_apply_by_keyboard_gives_the_focus_back_to_the_chat_input():
    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await open_settings(pilot, app)
        draft_max = app.query_one("#set-draft-max", Input)
        for _ in range(20):  # tab walks the fields down to Apply, never leaving the panel
            await pilot.press("tab")
            assert app.focused is not None and app.query_one("#settings") in app.focused.ancestors_with_self
            if app.focused is draft_max:
                draft_max.value = "2"
            if app.focused.id == "set-apply":
                break
        assert app.focused.id == "set-apply"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.settings.draft_max == 2)
        await pilot.pause()
        assert not app.query_one("#settings").display
        assert app.focused is app.query_one("#prompt")
        await pilot.press(*"next")
        assert typed_into_prompt(app) == "next"


async def test_settings_escape_gives_the_focus_back_to_the_chat_input():
    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await open_settings(pilot, app)
        await pilot.press("tab", "tab")  # somewhere inside the form
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one("#settings").display and app.focused is app.query_one("#prompt")
        await pilot.press(*"typed")
        assert typed_into_prompt(app) == "typed" and app.settings.draft_max == 3  # nothing applied
        await pilot.press("f2")  # F2 closes it too
        await pilot.pause()
        await pilot.press("f2")
        await pilot.pause()
        assert app.focused is app.query_one("#prompt")


async def test_settings_wide_screen_keeps_the_statistics_beside_the_panel():
    app = fake_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await open_settings(pilot, app)
        stats, settings = app.query_one(StatsPanel).region, app.query_one("#settings").region
        assert not stats.overlaps(settings) and app.query_one("#transcript").region.width >= 40


# -- statistics: placeholders, and speed-ups that say what they are -----------------------------------------------
async def test_empty_chat_shows_dashes_not_measured_looking_numbers():
    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await wait_until(pilot, lambda: app.ready)
        text = "\n".join(app.query_one(StatsPanel).lines())
        assert "0.00x" not in text and "1.00x" not in text and " 0.0 tok/s" not in text
        for label in ("acceptance", "mean length", "speed", "wall-clock", "priced (this machine)"):
            line = next(line for line in text.splitlines() if line.strip().startswith(label))
            assert line.rstrip().endswith("–"), line
        assert "break-even" not in text


async def test_a_worker_message_that_arrives_while_textual_tears_the_app_down_is_dropped():
    """A background slice can finish after ``run_test`` (or the terminal) closes the app without ``action_quit``:
    its widgets are gone by then, and querying them must not raise (CI once failed on exactly this race)."""
    from relaxtui.tui import workers
    from relaxtui.tui.engine import fake_costs

    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await wait_until(pilot, lambda: app.ready)
        generation = app.generation
    assert not app.is_running and not app.query(StatsPanel)  # torn down, and not through action_quit
    app.measured(workers.Measured(fake_costs(0.01), priced=True, more=True))
    app.show_progress(workers.Progress("timing this machine's round costs…"))
    app.models_loaded(workers.Loaded(fake_costs(0.01), ["drafter.gguf"]))
    app.generation_started(workers.GenerationStarted(generation, 3))
    app.load_failed(workers.LoadFailed("gone"))  # (each would raise NoMatches without the closing check)


def _stats_lines(cost, draft_lengths, accepted_per_round, tokens_per_s):
    from relaxtui.decoding.events import RoundTiming

    panel = StatsPanel()
    panel.cost = cost
    panel.reset(max(draft_lengths))
    for index, (drafted, accepted) in enumerate(zip(draft_lengths, accepted_per_round, strict=True)):
        panel.counters.observe_round(RoundTiming(index, drafted, accepted, 0.0, 0.01, 0.0, 0.0))
        panel.tokens += accepted + 1
    panel.final_tokens_per_s = tokens_per_s
    return panel, "\n".join(panel.lines())


def test_break_even_is_shown_only_below_it_by_the_cost_model():
    from relaxtui.costmodel.auto import break_even_length
    from relaxtui.tui.engine import fake_costs

    cost = fake_costs(0.01)  # N=3 breaks even at mean length 3.10 on these costs
    # mean length 3.5 (above 3.10) but a slow wall clock (busy machine): faster by the model, no break-even line
    panel, text = _stats_lines(cost, [3, 3], [3, 2], tokens_per_s=50.0)
    assert "wall-clock            0.50x" in text and "break-even" not in text and "slower" not in text
    assert float(text.split("priced (this machine) ")[1].split("x")[0]) >= 1.0
    # mean length 2.0 (below): slower by the model, and the line names N and the length it needs
    panel, text = _stats_lines(cost, [3, 3], [1, 1], tokens_per_s=150.0)
    needed = break_even_length(cost, 3).length
    assert panel.counters.mean_accepted_length < needed
    assert f"break-even at N=3: length {needed:.2f}" in text
    assert float(text.split("priced (this machine) ")[1].split("x")[0]) < 1.0


def test_break_even_never_contradicts_the_priced_speed_up():
    import random

    from relaxtui.tui.engine import fake_costs

    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 6)
        rounds = rng.randint(1, 12)
        lengths = [n] * rounds
        accepted = [rng.randint(0, n) for _ in range(rounds)]
        panel, text = _stats_lines(fake_costs(0.01, c_rel=rng.uniform(0.05, 0.6)), lengths, accepted, 20.0)
        priced = float(text.split("priced (this machine) ")[1].split("x")[0])
        if "break-even" in text:
            needed = float(text.split("length ")[-1])
            assert priced <= 1.0 and panel.counters.mean_accepted_length < needed + 1e-9, text


# -- saved chats reopen with --resume -----------------------------------------------------------------------------
async def _saved_chat(tmp_path) -> tuple[RelaxApp, Path]:
    app = RelaxApp(FakeChatEngine(), ChatSettings(rule="cactus", knob=1.0, drafter="fake-drafter", max_tokens=30,
                                                  seed=5, temperature=0.8, top_k=12), save_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "first question")
        await pilot.press("ctrl+s")
        await pilot.pause()
    return app, next(tmp_path.glob("chat-*.json"))


def _resumed_app(monkeypatch, path, *flags: str) -> RelaxApp:
    """What `relaxtui chat --fake --resume PATH FLAGS...` builds, captured instead of opening the screen."""
    from relaxtui.cli import main

    built = []
    monkeypatch.setattr(RelaxApp, "run", lambda self: built.append(self))
    assert main(["chat", "--fake", "--resume", str(path), *flags]) == 0
    (app,) = built
    return app


async def test_resume_restores_transcript_settings_and_continues_the_conversation(tmp_path, monkeypatch):
    original, path = await _saved_chat(tmp_path)
    app = _resumed_app(monkeypatch, path)
    sent = []
    real_prompt_tokens = app.engine.prompt_tokens

    def prompt_tokens(messages, thinking):
        sent.append(list(messages))
        return real_prompt_tokens(messages, thinking)

    monkeypatch.setattr(app.engine, "prompt_tokens", prompt_tokens)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        assert app.settings == original.settings  # rule, knob, N, sampling, seed, drafter, max tokens
        assert [(t.role, t.content) for t in app.turns] == [(t.role, t.content) for t in original.turns]
        assert app.events == original.events
        view = app.query(TokenView).last()  # coloured as it was: every span in its verdict's style
        spans = view.render().spans
        assert len(spans) == len(app.events)
        for span, event in zip(spans, app.events, strict=True):
            assert span.style.color == view.get_component_rich_style(f"token--{event.verdict.value}",
                                                                     partial=True).color
        assert "first question" in str(app.query("UserMessage").first().render())
        assert app.query_one(StatsPanel).counters.rounds == original.last_metrics.rounds
        assert _notes(app, "resumed chat") == [f"resumed {path} with its saved settings"]
        await pilot.click("#prompt")
        await pilot.press(*"and then?", "enter")
        await wait_until(pilot, lambda: len(app.turns) == 4 and not app.generating)
    assert [(m.role, m.content) for m in sent[-1]] == [(t.role, t.content) for t in original.turns] + [
        ("user", "and then?")]


async def test_resume_switches_to_the_saved_drafter_and_names_a_different_verifier(tmp_path, monkeypatch):
    _, path = await _saved_chat(tmp_path)
    document = json.loads(path.read_text())
    document["settings"]["drafter"] = "ngram"
    document["models"]["verifier"]["name"] = "other-verifier.gguf"
    path.write_text(json.dumps(document))
    app = _resumed_app(monkeypatch, path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        assert app.engine.drafter_name == app.settings.drafter == "ngram"
        notes = [n.message for n in app._notifications]
        assert any("saved with verifier other-verifier.gguf; it continues with fake-verifier" in n for n in notes)


def _notes(app: RelaxApp, title: str) -> list[str]:
    return [n.message for n in app._notifications if n.title == title]


async def test_flags_typed_with_resume_override_the_saved_settings_and_the_chat_says_which(tmp_path, monkeypatch):
    original, path = await _saved_chat(tmp_path)  # cactus 1, seed 5, T 0.8, top-k 12, 30 tokens
    # --seed 0 and --temperature 0.6 are the defaults: typed, they still override (typed is not "differs")
    app = _resumed_app(monkeypatch, path, "--rule", "mentored", "--alpha", "0.5", "--seed", "0",
                       "--temperature", "0.6")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        assert app.settings == replace(original.settings, rule="mentored", knob=0.5, seed=0, temperature=0.6)
        assert _notes(app, "resumed chat") == [
            f"resumed {path}; --rule mentored, --alpha 0.5, --seed 0, --temperature 0.6 override the saved settings"]
        await pilot.click("#prompt")
        await pilot.press(*"and then?", "enter")
        await wait_until(pilot, lambda: len(app.turns) == 4 and not app.generating)
    assert app.turns[-1].settings == app.settings and app.turns[1].settings == original.settings


async def test_a_knob_or_drafter_typed_with_resume_keeps_the_other_saved_settings(tmp_path, monkeypatch):
    original, path = await _saved_chat(tmp_path)
    document = json.loads(path.read_text())
    document["settings"]["drafter"] = "ngram"  # saved with prompt lookup: --drafter none must win over it
    path.write_text(json.dumps(document))
    app = _resumed_app(monkeypatch, path, "--alpha", "0.25", "--drafter", "none")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        assert app.settings == replace(original.settings, knob=0.25, drafter="none")  # still cactus
        assert app.engine.drafter_name == "none"
        assert _notes(app, "resumed chat")[0] == (  # then the model notice: saved with fake-drafter
            f"resumed {path}; --alpha 0.25, --drafter none override the saved settings")


def test_every_settings_flag_is_seen_as_typed_whatever_adds_it():
    """The chat's own options, the shared model and sampling groups, an option table: each flag that can override a
    resumed chat's setting records itself when typed, and nothing is recorded when nothing is typed."""
    from relaxtui.cli import parse
    from relaxtui.commands.chat import OVERRIDES, TYPED

    typed = ["--rule", "cactus", "--alpha", "1", "--draft-max", "2", "--max-tokens", "9", "--thinking", "on",
             "--temp", "0.6", "--top-k", "20", "--top-p", "0.95", "--seed", "0", "-md", "none", "--draft-kind", "ngram",
             "--relax-scope", "thinking"]
    args = parse(["chat", "--fake", "--resume", "x.json", *typed])
    assert set(OVERRIDES) <= set(getattr(args, TYPED))
    assert getattr(args, TYPED)["temperature"] == "--temp 0.6" and getattr(args, TYPED)["alpha"] == "--alpha 1"
    assert getattr(parse(["chat", "--fake"]), TYPED) == {}


async def test_a_bad_flag_typed_with_resume_is_one_line_before_the_screen(tmp_path, monkeypatch, capsys):
    from relaxtui.cli import main

    _, path = await _saved_chat(tmp_path)

    def no_screen(self):  # noqa: ANN001
        raise AssertionError("the UI opened")

    monkeypatch.setattr(RelaxApp, "run", no_screen)
    assert main(["chat", "--fake", "--resume", str(path), "--alpha", "-1"]) == 2  # cactus needs delta >= 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: ") and "cactus" in err, err


async def test_save_names_the_transcripts_folder_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # transcripts/ is relative to the folder the chat started from
    app = RelaxApp(FakeChatEngine(), ChatSettings(drafter="fake-drafter", max_tokens=20))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "where did it go?")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: bool(_notes(app, "chat saved")))
    folder = (tmp_path / "transcripts").resolve()
    saved = next(folder.glob("chat-*.json"))
    assert _notes(app, "chat saved") == [f"saved {saved.with_suffix('.md').name} and {saved.name} in {folder} "
                                         f"(reopen: relaxtui chat --resume {folder / saved.name})"]


def test_saved_chat_round_trips_through_the_loader(tmp_path):
    from relaxtui.tui.engine import ModelInfo
    from relaxtui.tui.save import SavedChat, Turn, chat_document, load_chat

    settings = ChatSettings(rule="casc-opt", knob=float("-inf"), drafter="fake-drafter", max_tokens=8)
    events = tuple(e for e in FakeChatEngine().stream([], settings, lambda: False) if not hasattr(e, "metrics"))
    chat = SavedChat(settings, ModelInfo("v.gguf", "/m/v.gguf"), ModelInfo("ngram", None, "ngram"),
                     (Turn("user", "hi"), Turn("assistant", "x", events, None, settings)), "2025-01-01T00:00:00")
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat_document(chat)))
    assert load_chat(path) == chat


def _bad_files(tmp_path):
    from relaxtui.tui.save import MAX_BYTES

    good = {"format": "relaxtui-chat", "version": 1, "models": {"verifier": {"name": "v"}, "drafter": {"name": "d"}},
            "settings": {"rule": "strict"}, "messages": [{"role": "user", "content": "hi"}]}

    def variant(**changes):
        return json.dumps({**good, **changes})

    cases = {
        "not-json.json": ("{oops", "not JSON"),
        "old.jsonl": ('{"type": "settings"}\n{"type": "token"}\n', "not JSON"),
        "list.json": ("[1, 2]", "not a relaxtui saved chat"),
        "foreign.json": (json.dumps({"name": "something else"}), "not a relaxtui saved chat"),
        "future.json": (variant(version=2), "format version 2"),
        "role.json": (variant(messages=[{"role": "system", "content": "x"}]), "messages[0].role must be"),
        "type.json": (variant(settings={"rule": "strict", "draft_max": "3"}), "settings.draft_max must be a whole"),
        "bool.json": (variant(settings={"rule": "strict", "top_k": True}), "settings.top_k must be a whole"),
        "missing.json": (variant(messages=[{"role": "user"}]), "messages[0].content is missing"),
        "event.json": (variant(messages=[{"role": "assistant", "content": "", "events": [{"index": 0}]}]),
                       "messages[0].events[0].token_id is missing"),
        "rule.json": (variant(settings={"rule": "nonsense"}), "settings.rule must name a known rule (got 'nonsense'"),
        "big.json": (" " * (MAX_BYTES + 1), "larger than"),
        "binary.json": (b"\xff\xfe\x00garbage", "not JSON"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        yield path, message
    yield tmp_path / "absent.json", "No such file"
    yield tmp_path, "is not a regular file (a directory)"


def test_a_bad_resume_file_is_one_line_and_exit_2_before_the_screen(tmp_path, capsys, monkeypatch):
    from relaxtui.cli import main

    def no_screen(self):  # noqa: ANN001
        raise AssertionError("the UI opened")

    monkeypatch.setattr(RelaxApp, "run", no_screen)
    monkeypatch.setattr("relaxtui.tui.save.MAX_BYTES", 4096)  # the real bound is 64 MiB
    for path, message in _bad_files(tmp_path):
        assert main(["chat", "--fake", "--resume", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"relaxtui: error: cannot resume {path}"), err
        assert message in err and "Traceback" not in err, (path, err)


async def test_the_chat_takes_a_message_while_its_drafter_loads_and_answers_it_with_the_drafter_once_loaded():
    """The message box takes input once the verifier is loaded; the drafter loads next on the same model thread, so a
    message sent meanwhile is answered after it, speculatively (the gate holds the drafter's load)."""
    gate = threading.Event()
    engine = FakeChatEngine(drafter_gate=gate)
    app = RelaxApp(engine, ChatSettings(max_tokens=20))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.takes_input)
            assert not app.ready and not app.query_one("#prompt", Input).disabled
            await pilot.click("#prompt")
            await pilot.press(*"hello", "enter")
            await pilot.pause(0.2)
            assert app.generating and not app.events and not gate.is_set()  # queued behind the drafter's load
            gate.set()
            await wait_until(pilot, lambda: app.last_metrics is not None and not app.generating)
            assert app.ready and app.last_metrics.output_tokens > 0
            assert any(event.verdict is Verdict.ACCEPTED for event in app.events)  # a speculative reply
    finally:
        gate.set()  # (a failure above must not hold the model thread)


async def test_a_drafter_that_fails_to_load_after_the_box_took_input_leaves_the_verifier_alone_set_up_whole():
    """The failure is said once; the chat is then loaded without a drafter (its settings say "none", so applying a
    setting does not try the failed drafter again), measures in the background, and answers verifier-only."""
    engine = FakeChatEngine(drafter_error="cannot load drafter broken.gguf")
    app = RelaxApp(engine, ChatSettings(max_tokens=12))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.ready)
        await wait_until(pilot, lambda: any("broken.gguf" in n.message for n in app._notifications))
        assert app.takes_input and app.settings.drafter == "none" == engine.drafter_name and engine.drafter is None
        await send(pilot, app)
        assert app.events and all(event.verdict is Verdict.VERIFIER for event in app.events)
        assert app.last_metrics.rounds == app.last_metrics.output_tokens  # one token a round: nothing drafted


async def test_the_chat_answers_before_its_prices_are_measured_and_says_when_they_arrive():
    """chat takes its first message at once: the verify prices are measured in the background, a slice per worker on
    the model thread between replies; a reply meanwhile runs with its drafts whole (the measurement here does not end
    until the gate is set), and the chat says when they arrive, after which the replies' drafts are cut by them."""
    gate = threading.Event()
    engine = FakeChatEngine(prices=(1.0, 1.56, 1.9, 1.73, 2.22), prices_gate=gate, drafter="ngram")
    app = RelaxApp(engine, ChatSettings(drafter="ngram", max_tokens=20))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app)
        assert not gate.is_set() and engine.pair.prices() is None and engine.pair.background.pending
        assert not engine.priced and engine.drafter.traits.cut == "priced"  # a lookup: cut once prices are there
        gate.set()
        await wait_until(pilot, lambda: engine.priced)
        await wait_until(pilot, lambda: any("verify prices are measured" in n.message for n in app._notifications))
        assert engine.drafter._odds[0] is None  # the first reply began without prices: its drafts were whole
        await send(pilot, app, "again")
        assert engine.drafter._odds[0] is not None  # the second began with them: its drafts were cut by price
