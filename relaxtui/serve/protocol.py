"""OpenAI request bodies in, checked values out.

Every field a request may carry is checked here, before anything reaches the model thread, and each failure is
one ``ApiError`` naming the field (vLLM's single error shape: ``message, type, param, code``). The body as a whole
was checked first (``body.read_json``: UTF-8, strict JSON, an object, every string text). JSON types are
exact: a bool is not a number, ``1.0`` is not an integer count, ``NaN`` is refused by the JSON reader itself.
Fields of the OpenAI API that would change what the verifier's distribution means (penalties, logit bias, tools,
structured output) are refused rather than ignored; fields that change nothing here (``metadata``) are ignored, as
every OpenAI-compatible server does, so SDKs that send them keep working; ``user`` scopes what a keyed server learns
(``relaxtui.serve.policy``). A field that sets one of the
option table's settings (``relaxtui.options``: temperature, seed, ``speculative.draft_max``, …) is read with the
table's own check, the one its flag uses, and a refusal from further down (a rule's knob) names the setting, which
becomes its field here; the request's rule is built here, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from relaxtui.checks import BadValue, Choice
from relaxtui.decoding.drafters import DRAFT_KINDS as drafter_kinds
from relaxtui.decoding.drafters import drafter_kind
from relaxtui.decoding.sampling import SamplingParams
from relaxtui.errors import UserError
from relaxtui.options import (
    ALPHA,
    DRAFT_KIND,
    DRAFT_MAX,
    MAX_TOKENS,
    NO_DRAFTER,
    RELAX_SCOPE,
    RULE,
    SEED,
    SPECULATIVE,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    Speculative,
)
from relaxtui.rules import Rule, make, split_spec
from relaxtui.serve.body import bad, get_bool, get_int, get_setting, get_text, json_type, setting_error
from relaxtui.serve.policy import Policy, read_user
from relaxtui.text import Message

MAX_N = 16  # choices per request
MAX_STOPS = 16
MAX_STOP_CHARS = 512
MAX_TOP_LOGPROBS = 20
MAX_PROMPTS = 64  # prompts in one /v1/completions batch
TOP_K_OFF = -1  # how vLLM spells top-k off (the table's 0)
MAX_COMPLETION_TOKENS = replace(MAX_TOKENS, field="max_completion_tokens")  # the newer name of max_tokens
VERIFIER_ALONE = NO_DRAFTER  # the draft_kind that drafts nothing
DRAFT_KINDS = (*drafter_kinds, VERIFIER_ALONE)
REQUEST_DRAFT_KIND = replace(DRAFT_KIND, check=Choice(DRAFT_KINDS))  # the table's kinds, and the verifier alone
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_REFUSED_IF_SET = {  # OpenAI fields that would change the sampled distribution: refused unless neutral
    "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": {}, "tools": [], "functions": [],
    "repetition_penalty": 1, "min_p": 0,
}


@dataclass(frozen=True)
class Defaults:
    """What the server was started with: every request field it does not give takes these."""

    speculative: Speculative
    sampling: SamplingParams
    seed: int = 0
    max_tokens: int | None = None  # None: up to the context of a slot
    thinking: bool | None = None
    draft_kinds: tuple[str, ...] = DRAFT_KINDS  # what this server's pair can draft with
    policy: Policy = Policy()  # what the operator lets requests choose, and how learned state is scoped


@dataclass(frozen=True)
class CompletionRequest:
    """One checked request: the prompts (messages for chat), and how to generate each of its choices."""

    chat: bool
    messages: tuple[Message, ...]  # chat only
    prompts: tuple[str | tuple[int, ...], ...]  # completions only: text or token ids, one entry per prompt
    thinking: bool | None
    n: int
    stream: bool
    include_usage: bool
    stop: tuple[str, ...]
    max_tokens: int | None
    sampling: SamplingParams
    seed: int
    logprobs: int | None  # None: off; k >= 0: the chosen token's log-probability and k alternatives
    echo: bool
    verdicts: bool
    speculative: Speculative
    model: str | None
    rule: Rule | None = None  # built once, here, for every choice of the request; None: it drafts nothing
    scoring: bool = False  # echo with logprobs: the prompt is scored (relaxtui.serve.scoring), max_tokens is 0 or 1
    user: str | None = None  # OpenAI's end-user id: under an API key, a scope of its own (relaxtui.serve.policy)


# -- fields --------------------------------------------------------------------------------------------------
def parse_request(body: dict[str, Any], *, chat: bool, defaults: Defaults, n_vocab: int) -> CompletionRequest:
    """Check a /v1/chat/completions (``chat``) or /v1/completions body (from ``read_json``) against this server's
    defaults."""
    for name, neutral in _REFUSED_IF_SET.items():
        if body.get(name) not in (None, neutral):
            raise bad(name, "is not supported by relaxtui (it would change the distribution the acceptance rules "
                            "verify against)")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise bad("response_format", 'only {"type": "text"} is supported')
    stream = get_bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("stream_options", f"must be an object (got {json_type(options)})")
    include_usage = get_bool(options or {}, "include_usage", False, "stream_options.")
    if include_usage and not stream:
        raise bad("stream_options", "is only allowed with stream: true")
    model = get_text(body, "model")
    sampling = parse_sampling(body, defaults.sampling)
    speculative, rule = parse_speculative(body.get("speculative"), defaults, sampling)
    scoring = not chat and body.get("echo") is True and body.get("logprobs") is not None
    max_tokens = scoring_budget(body) if scoring else get_setting(body, MAX_COMPLETION_TOKENS)
    if max_tokens is None:
        max_tokens = get_setting(body, MAX_TOKENS)
    seed = get_setting(body, SEED)
    verdicts = get_bool(body, "verdicts", False)
    defaults.policy.check_verdicts(verdicts)
    n = get_int(body, "n", 1, MAX_N) or 1
    messages: tuple[Message, ...]
    prompts: tuple[str | tuple[int, ...], ...]
    if chat:
        messages, prompts = parse_messages(body.get("messages")), ()
        logprobs = parse_chat_logprobs(body)
        echo = False
        thinking = parse_thinking(body, defaults.thinking)
    else:
        messages, prompts = (), parse_prompts(body.get("prompt"), n_vocab)
        logprobs = get_int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
        echo = get_bool(body, "echo", False)
        thinking = None
    return CompletionRequest(
        chat=chat, messages=messages, prompts=prompts, thinking=thinking, n=n, stream=stream,
        include_usage=include_usage, stop=parse_stop(body.get("stop")),
        max_tokens=max_tokens if max_tokens is not None else defaults.max_tokens, sampling=sampling,
        seed=defaults.seed if seed is None else seed, logprobs=logprobs, echo=echo,
        verdicts=verdicts, speculative=speculative, model=model, rule=rule, scoring=scoring, user=read_user(body),
    )


def scoring_budget(body: dict[str, Any]) -> int:
    """The completion budget of a scoring request (echo with logprobs): 0 (the prompt alone, OpenAI's
    ``max_tokens: 0``) or 1 (lm-eval's log-likelihood requests, which drop that token); no stop strings."""
    name, value = "max_tokens", None
    for name in ("max_completion_tokens", "max_tokens"):
        value = get_int(body, name, 0, 2**31 - 1)
        if value is not None:
            break
    if value is None or value > 1:
        raise bad(name, "echo with logprobs scores the prompt: send max_tokens 0 or 1 "
                        f"(got {'none' if value is None else value})")
    if parse_stop(body.get("stop")):
        raise bad("stop", "is not used when scoring a prompt (echo with logprobs)")
    return value


def parse_sampling(body: dict[str, Any], default: SamplingParams) -> SamplingParams:
    if body.get(TOP_K.key) == TOP_K_OFF:
        body = {**body, TOP_K.key: 0}
    temperature, top_k, top_p = (get_setting(body, setting) for setting in (TEMPERATURE, TOP_K, TOP_P))
    return SamplingParams(default.temperature if temperature is None else temperature,
                          default.top_k if top_k is None else top_k, default.top_p if top_p is None else top_p)


def parse_speculative(value: object, defaults: Defaults, sampling: SamplingParams) -> tuple[Speculative, Rule | None]:
    """The extension object: any subset of its fields in the option table (rule as NAME or NAME:KNOB, alpha,
    draft_max, draft_kind), resolved against the server's defaults, and the request's rule (None: it drafts
    nothing)."""
    base = defaults.speculative
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise bad("speculative", f"must be an object (got {json_type(value)})")
    known = [setting.key for setting in SPECULATIVE]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise bad(f"speculative.{unknown[0]}", f"unknown field (known: {', '.join(known)})")
    spec, alpha = get_setting(value, RULE), get_setting(value, ALPHA)
    if spec is None:
        name, knob = base.rule, (alpha if alpha is not None else (base.knob if ALPHA.key not in value else None))
    else:
        try:
            name, knob = split_spec(spec, alpha)
        except BadValue as exc:
            raise setting_error(exc) from None
        if knob is None and name == base.rule and ALPHA.key not in value:
            knob = base.knob  # the server's knob for its own rule
    draft_max = get_setting(value, DRAFT_MAX)
    kind = get_setting(value, REQUEST_DRAFT_KIND)
    if kind is not None and kind not in defaults.draft_kinds:
        raise bad(DRAFT_KIND.request_name, f"this server cannot draft with {kind!r} (it can: "
                                           f"{', '.join(defaults.draft_kinds)})")
    if kind is not None:
        defaults.policy.check_kind(kind, DRAFT_KIND.request_name, VERIFIER_ALONE)
    scope = get_setting(value, RELAX_SCOPE)
    speculative = Speculative(name, knob, base.draft_max if draft_max is None else draft_max,
                              base.drafter if kind is None else kind, base.relax_scope if scope is None else scope)
    rule = request_rule(speculative, sampling)
    speculative = replace(speculative, knob=rule.knob)  # the knob the rule runs with (its default when none given)
    if speculative.drafts:
        defaults.policy.check_rule(rule, RULE.request_name, ALPHA.request_name if ALPHA.key in value else
                                   RULE.request_name)
    return speculative, rule if speculative.drafts else None


def request_rule(speculative: Speculative, sampling: SamplingParams) -> Rule:
    """The request's rule, built once by the factory: its knob validated and, when the request drafts at temperature
    0, a rule that cannot run greedy refused; what the loop would refuse before decoding, refused here as a 400 that
    names the field to fix."""
    try:
        rule = make(speculative.rule, speculative.knob, temperature=sampling.temperature if speculative.drafts else 1.0)
        if speculative.drafts:
            rule.check_draft_max(speculative.draft_max)  # (FLy at N = 1: speculative.draft_max)
    except BadValue as exc:
        raise setting_error(exc) from None
    except UserError as exc:  # an unknown rule name (the message lists the known ones)
        raise bad(RULE.request_name, str(exc)) from None
    # a kind whose drafts carry no distribution (prompt lookup, the n-gram family, suffix) has no logits to give
    if speculative.drafts and rule.needs_draft_logits and not drafter_kind(speculative.drafter).has_distribution:
        raise bad(DRAFT_KIND.request_name, f"rule {rule.name!r} needs the drafter's logits, which "
                                           f"{speculative.drafter!r} drafts without; use a model drafter")
    return rule


def parse_stop(value: object) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "must be a string or an array of strings")
    if len(stops) > MAX_STOPS:
        raise bad("stop", f"at most {MAX_STOPS} stop strings (got {len(stops)})")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise bad("stop", f"each stop string must have 1..{MAX_STOP_CHARS} characters")
    return tuple(stops)


def parse_chat_logprobs(body: dict[str, Any]) -> int | None:
    top = get_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if not get_bool(body, "logprobs", False):
        if top:
            raise bad("top_logprobs", "needs logprobs: true")
        return None
    return top or 0


def parse_thinking(body: dict[str, Any], default: bool | None) -> bool | None:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return default
    if not isinstance(kwargs, dict):
        raise bad("chat_template_kwargs", f"must be an object (got {json_type(kwargs)})")
    unknown = sorted(set(kwargs) - {"enable_thinking"})
    if unknown:
        raise bad(f"chat_template_kwargs.{unknown[0]}", "unknown field (known: enable_thinking)")
    value = kwargs.get("enable_thinking")
    if value is not None and not isinstance(value, bool):
        raise bad("chat_template_kwargs.enable_thinking", f"must be a boolean (got {json_type(value)})")
    return default if value is None else value


def parse_messages(value: object) -> tuple[Message, ...]:
    """Chat messages: role and content (a string, or text parts); at least one."""
    if not isinstance(value, list) or not value:
        raise bad("messages", "must be a non-empty array of messages")
    messages = []
    for i, item in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"must be an object (got {json_type(item)})")
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad(f"{where}.role", f"must be one of {', '.join(ROLES)} (got {json_type(role)})")
        if item.get("tool_calls"):
            raise bad(f"{where}.tool_calls", "tool calls are not supported")
        messages.append(Message(ROLES[role], _content(item.get("content"), f"{where}.content")))
    return tuple(messages)


def _content(value: object, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{j}]", 'only text parts ({"type": "text", "text": ...}) are supported')
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, f"must be a string or an array of text parts (got {json_type(value)})")


def parse_prompts(value: object, n_vocab: int) -> tuple[str | tuple[int, ...], ...]:
    """A completions prompt: text, token ids, or an array of either (a batch)."""
    if isinstance(value, str):
        prompts: Sequence[object] = [value]
    elif isinstance(value, list) and value and all(_is_int(t) for t in value):
        prompts = [value]
    elif isinstance(value, list) and value:
        prompts = value
    else:
        raise bad("prompt", "must be a string, an array of token ids, or an array of those")
    if len(prompts) > MAX_PROMPTS:
        raise bad("prompt", f"at most {MAX_PROMPTS} prompts per request (got {len(prompts)})")
    out: list[str | tuple[int, ...]] = []
    for i, prompt in enumerate(prompts):
        where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(prompt, str):
            out.append(prompt)
        elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
            bad_id = next((t for t in prompt if not 0 <= t < n_vocab), None)
            if bad_id is not None:
                raise bad(where, f"token id {bad_id} is outside the vocabulary (0..{n_vocab - 1})")
            out.append(tuple(prompt))
        else:
            raise bad(where, "must be a string or a non-empty array of token ids")
    return tuple(out)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- /tokenize, /detokenize ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizeRequest:
    content: str
    add_special: bool
    with_pieces: bool


def parse_tokenize(body: dict[str, Any]) -> TokenizeRequest:
    """A /tokenize body, as llama-server reads it (``content``, ``add_special``, default false; ``with_pieces``) or
    as vLLM does (``prompt``, ``add_special_tokens``, default true: what lm-eval's remote tokenizer sends)."""
    if "prompt" in body and "content" not in body:  # vLLM's names
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise bad("prompt", f"must be a string (got {json_type(prompt)})")
        return TokenizeRequest(prompt, get_bool(body, "add_special_tokens", True), False)
    content = body.get("content")
    if not isinstance(content, str):
        raise bad("content", f"must be a string (got {json_type(content)})")
    return TokenizeRequest(content, get_bool(body, "add_special", False), get_bool(body, "with_pieces", False))


def parse_detokenize(body: dict[str, Any], n_vocab: int) -> list[int]:
    """llama-server's /detokenize body: ``tokens``, an array of ids in the vocabulary."""
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(_is_int(t) for t in tokens):
        raise bad("tokens", "must be an array of token ids")
    if any(not 0 <= t < n_vocab for t in tokens):
        raise bad("tokens", f"token ids must be in 0..{n_vocab - 1}")
    return tokens
