"""The server's counters in Prometheus' text format (``GET /metrics``).

Speculative-decoding counters use vLLM's names (``spec_decode_num_drafts``, ``…_num_draft_tokens``,
``…_num_accepted_tokens``, ``…_num_accepted_tokens_per_pos`` with a 0-based ``position`` label), the serving ones
llama.cpp's (``prompt_tokens_total``, ``tokens_predicted_total``, ``requests_processing``, ``requests_deferred``),
all under the ``relaxtui:`` prefix as vLLM uses ``vllm:`` and llama-server ``llamacpp:``. Definitions:

- a *draft* is a round that verified at least one drafted token; *draft tokens* are the tokens verified as drafts;
  *accepted tokens* those the rule kept; per position, how often draft i (0-based) was kept;
- every finished sequence counts, a cancelled one too: the counters say what the models did, and equal the sum of
  the ``timings`` / ``relaxtui.stats`` of the responses sent;
- ``predicted_tokens_seconds`` is the output rate of all sequences together over the last ``WINDOW_S`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from relaxtui.decoding.events import Metrics
from relaxtui.serve.render import Totals

WINDOW_S = 10.0
PREFIX = "relaxtui:"


class ServerMetrics:
    """Counters fed by the model thread (tokens, finished sequences) and the HTTP side (requests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.totals = Totals()
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.sequences = 0
        self.scored_tokens = 0  # prompt tokens scored (echo with logprobs), and the model thread's seconds on them
        self.scored_s = 0.0
        self.requests: dict[tuple[str, str], int] = {}  # (endpoint, outcome) -> count
        self._recent: deque[tuple[float, int]] = deque()  # (when, tokens) for the rolling rate

    def observe_tokens(self, count: int) -> None:
        now = self.clock()
        with self._lock:
            self._recent.append((now, count))
            self._trim(now)

    def observe_finished(self, metrics: Metrics) -> None:
        with self._lock:
            self.totals.add(metrics, metrics.output_tokens)
            self.prefill_s += metrics.prefill_s
            self.decode_s += metrics.decode_s
            self.sequences += 1

    def observe_scored(self, tokens: int, seconds: float) -> None:
        with self._lock:
            self.scored_tokens += tokens
            self.scored_s += seconds

    def observe_request(self, endpoint: str, outcome: str) -> None:
        with self._lock:
            key = (endpoint, outcome)
            self.requests[key] = self.requests.get(key, 0) + 1

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - WINDOW_S:
            self._recent.popleft()

    def rate(self) -> float:
        now = self.clock()
        with self._lock:
            self._trim(now)
            return sum(n for _, n in self._recent) / WINDOW_S

    def render(self, *, processing: int, deferred: int, slots: int, model: str, acceptance: bool = True) -> str:
        """The exposition text: HELP and TYPE lines, then samples; without the draft and acceptance counters when
        ``acceptance`` is off (``--verdicts off``: read before and after a request, they would tell its own counts)."""
        rate = self.rate()
        with self._lock:
            t = self.totals
            lines: list[str] = []

            def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
                lines.append(f"# HELP {PREFIX}{name} {help_text}")
                lines.append(f"# TYPE {PREFIX}{name} {kind}")
                lines.extend(f"{PREFIX}{name}{labels} {_number(value)}" for labels, value in samples)

            if acceptance:
                metric("spec_decode_num_drafts_total", "counter", "Rounds that verified a draft.", [("", t.drafts)])
                metric("spec_decode_num_draft_tokens_total", "counter", "Tokens verified as drafts.",
                       [("", t.draft_tokens)])
                metric("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens the acceptance rule kept.",
                       [("", t.accepted_tokens)])
                metric("spec_decode_num_accepted_tokens_per_pos_total", "counter",
                       "Draft tokens kept, by position in the draft (0-based).",
                       [(f'{{position="{i}"}}', n) for i, n in enumerate(t.accepted_per_position)])
                metric("spec_decode_rounds_total", "counter", "Verifier batches per sequence (rounds).",
                       [("", t.rounds)])
            metric("prompt_tokens_total", "counter", "Prompt tokens of finished sequences.", [("", t.prompt_tokens)])
            metric("prompt_seconds_total", "counter", "Prefill seconds of finished sequences.",
                   [("", self.prefill_s)])
            metric("tokens_predicted_total", "counter", "Tokens the loop emitted for finished sequences.",
                   [("", t.output_tokens)])
            metric("tokens_predicted_seconds_total", "counter", "Decode seconds of finished sequences.",
                   [("", self.decode_s)])
            metric("sequences_finished_total", "counter", "Sequences (choices) that left the batch.",
                   [("", self.sequences)])
            metric("prompt_tokens_scored_total", "counter", "Prompt tokens scored (echo with logprobs).",
                   [("", self.scored_tokens)])
            metric("prompt_scored_seconds_total", "counter", "Model-thread seconds spent scoring prompts.",
                   [("", self.scored_s)])
            metric("requests_total", "counter", "HTTP requests by endpoint and outcome.",
                   [(f'{{endpoint="{e}",outcome="{o}"}}', n) for (e, o), n in sorted(self.requests.items())])
        metric("requests_processing", "gauge", "Sequences holding a slot now.", [("", processing)])
        metric("requests_deferred", "gauge", "Sequences waiting for a slot (queue length).", [("", deferred)])
        metric("slots", "gauge", "Slots (sequences per context, --parallel).", [("", slots)])
        metric("predicted_tokens_seconds", "gauge", f"Output tokens per second, all sequences, last {WINDOW_S:g} s.",
               [("", rate)])
        lines.append(f'{PREFIX}model_info{{model="{_label(model)}"}} 1')
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
