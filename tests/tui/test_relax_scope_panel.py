"""The chat's settings panel carries the relax scope (F2): applied to the next reply where the verifier marks a thinking
block, refused in one notice where it does not; a saved chat keeps it."""

from __future__ import annotations

from textual.widgets import Select

from relaxtui.tui.app import RelaxApp
from relaxtui.tui.engine import ChatSettings, FakeChatEngine
from tests.support.pilot import SIZE, send, wait_until


def app_on(engine: FakeChatEngine) -> RelaxApp:
    return RelaxApp(engine, ChatSettings(rule="ensemble", knob=0.0, drafter="fake-drafter", max_tokens=30, seed=3))


def thinking_engine() -> FakeChatEngine:
    """The fake pair, its verifier's last two words made the think tags (each one token) and its template one that
    writes them: a verifier that marks a thinking block."""
    engine = FakeChatEngine()
    engine.verifier.pieces[-2:] = [b"<think>", b"</think>"]
    engine.verifier.chat_template = "<think>"
    return engine


async def choose_scope(pilot, app: RelaxApp, scope: str) -> None:
    await wait_until(pilot, lambda: app.ready)
    await pilot.press("f2")
    await wait_until(pilot, lambda: bool(app.query("#set-relax-scope")))
    app.query_one("#set-relax-scope", Select).value = scope
    await pilot.click("#set-apply")


async def test_a_scope_the_verifier_cannot_mark_is_refused_in_the_panel():
    app = app_on(FakeChatEngine())
    async with app.run_test(size=SIZE) as pilot:
        await choose_scope(pilot, app, "thinking")
        await wait_until(pilot, lambda: bool(app._notifications))
        notes = [(n.title, n.message) for n in app._notifications]
        assert notes == [("invalid settings", "relax scope 'thinking' needs a thinking block, and the verifier's "
                                              "tokenizer has no single <think> token: only 'all' runs with this "
                                              "verifier")]
        assert app.settings.relax_scope == "all"


async def test_a_scope_applies_to_the_next_reply():
    engine = thinking_engine()
    app = app_on(engine)
    async with app.run_test(size=SIZE) as pilot:
        await choose_scope(pilot, app, "answer")
        await wait_until(pilot, lambda: app.settings.relax_scope == "answer")
        seen: list[str] = []
        stream = engine.stream

        def recorded(messages, settings, should_stop):  # noqa: ANN001, ANN202
            seen.append(settings.validated()[1].relax_scope)
            return stream(messages, settings, should_stop)
        engine.stream = recorded  # type: ignore[method-assign]
        await send(pilot, app)
        assert seen == ["answer"] and app.last_metrics is not None and app.last_metrics.output_tokens == 30
