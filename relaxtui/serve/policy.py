"""What an operator lets a shared server's requests choose, and whose learned state a request may reuse.

A request picks its rule, knob and drafter kind (``serve/protocol.py``); on a server several clients share, the
operator bounds that choice: ``--allow-rules NAME[:LIMIT],…`` (LIMIT: the most relaxed knob allowed, compared in the
rule's own orientation, ``Rule.relaxes_upward``), ``--allow-draft-kinds KIND,…`` and ``--verdicts off`` (no per-token
verdicts and no acceptance counts in responses). Strict and the verifier alone are always allowed: they serve the
verifier's own distribution. A request outside the policy is a 400 naming the field and the policy.

A *scope* is whose cached state a request may reuse — the drafters' corpora and the prompt cache (docs/serve.md,
"Several tenants"): each API key, and each ``user`` a request names under it, is its own scope; a server without
keys, or started with ``--share-learning``, has one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relaxtui.checks import BadValue
from relaxtui.errors import UserError
from relaxtui.rules import Rule, rule_class, second_knob, split_spec
from relaxtui.serve.body import bad

ALWAYS_ALLOWED_RULES = ("strict",)  # the lossless rule: what the verifier alone would serve
DEFAULT_SCOPES = 16  # tenants (API keys, users) whose learned drafter state a server keeps at once
MAX_USER_CHARS = 256  # a request's ``user``: an end-user id (OpenAI's field), bounded before it keys anything


@dataclass(frozen=True)
class Policy:
    """``rules``: None, any rule at any knob; else rule name -> the most relaxed knob allowed (None: any knob).
    ``draft_kinds``: None, every kind the pair drafts with; else those (and the verifier alone)."""

    rules: Mapping[str, float | None] | None = None
    draft_kinds: tuple[str, ...] | None = None
    verdicts: bool = True  # False: responses show no per-token verdicts and no acceptance counts
    share_learning: bool = False  # True: one scope for every key (the keys are one tenant)
    max_scopes: int = DEFAULT_SCOPES  # scopes whose learned drafter state is kept, least recently used evicted first
    second_knobs: Mapping[str, float | None] = field(default_factory=dict)  # rule -> the second knob its requests
    # use where it has a limit (--allow-rules NAME:LIMIT:KNOB2; not given: the rule's default)

    def check_rule(self, rule: Rule, param_rule: str, param_knob: str) -> None:
        """A 400 naming the field when ``rule`` (built, its knob resolved) is outside the policy."""
        if self.rules is None or rule.name in ALWAYS_ALLOWED_RULES:
            return
        if rule.name not in self.rules:
            raise bad(param_rule, f"rule {rule.name!r} is not allowed on this server (--allow-rules "
                                  f"{self.rules_text()}; strict is always allowed)")
        limit = self.rules[rule.name]
        if limit is not None and rule.knob is not None and not within(rule, limit):
            side = "at most" if type(rule).relaxes_upward else "at least"
            raise bad(param_knob, f"{rule.name} {type(rule).knob_name} = {rule.knob:g} is more relaxed than this "
                                  f"server allows ({side} {limit:g}: --allow-rules {self.rules_text()})")
        allowed2 = self.second_knobs.get(rule.name, type(rule).knob2_default)
        if limit is not None and rule.knob2 != allowed2:  # a second knob relaxes too (k, t_single, W): held as set
            shown = "its default" if allowed2 is None else f"{allowed2:g}"
            raise bad(param_rule, f"{rule.name}'s {type(rule).knob2_name} is held at {shown} on this server "
                                  f"(--allow-rules {self.rules_text()})")

    def check_kind(self, kind: str, param: str, verifier_alone: str) -> None:
        if self.draft_kinds is not None and kind != verifier_alone and kind not in self.draft_kinds:
            raise bad(param, f"draft kind {kind!r} is not allowed on this server (--allow-draft-kinds "
                             f"{','.join(self.draft_kinds)}; {verifier_alone!r}, the verifier alone, always is)")

    def check_verdicts(self, asked: bool) -> None:
        if asked and not self.verdicts:
            raise bad("verdicts", "this server does not show per-token verdicts (--verdicts off)")

    def rules_text(self) -> str:
        assert self.rules is not None
        def entry(name: str, limit: float | None) -> str:
            second = self.second_knobs.get(name)
            return name if limit is None else f"{name}:{limit:g}" + ("" if second is None else f":{second:g}")
        return ",".join(entry(name, limit) for name, limit in self.rules.items())

    def scope(self, key: int | None, user: str | None) -> object:
        """Whose learned state a request reuses: its key's (and its user's under that key); one scope for a server
        without keys (``key`` None) or with ``--share-learning``. Users are keyed by a digest: the scope never holds
        their text."""
        if self.share_learning or key is None:
            return None
        if not user:
            return ("key", key)
        return ("key", key, hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:32])

    def describe(self, *, keyed: bool) -> dict[str, Any]:
        """What ``/v1/models`` says of the policy (clients learn what they may ask for)."""
        rules: dict[str, Any] | None = None
        if self.rules is not None:
            rules = {name: self._limits(name, limit)
                     for name, limit in {**dict.fromkeys(ALWAYS_ALLOWED_RULES), **self.rules}.items()}
        return {"rules": rules, "draft_kinds": list(self.draft_kinds) if self.draft_kinds is not None else None,
                "verdicts": self.verdicts,
                "learning": "shared" if self.share_learning or not keyed else "per key (and user)",
                "learning_scopes": self.max_scopes}

    def _limits(self, name: str, limit: float | None) -> dict[str, Any]:
        """One allowed rule's card: its most relaxed knob and which way relaxes, and where a second knob is held
        (``check_rule``: at the operator's value, else the rule's default; None: the rule works its default out)."""
        if limit is None:
            return {}
        card: dict[str, Any] = {"most_relaxed": limit, "orientation": _orientation(name)}
        cls = rule_class(name)
        if cls.knob2_name is not None:
            card["second_knob"] = {"name": cls.knob2_name, "held_at": self.second_knobs.get(name, cls.knob2_default)}
        return card


def within(rule: Rule, limit: float) -> bool:
    """Whether the rule's knob is no more relaxed than ``limit``, in the rule's own orientation."""
    assert rule.knob is not None
    return rule.knob <= limit if type(rule).relaxes_upward else rule.knob >= limit


def _orientation(name: str) -> str:
    return "bigger relaxes" if rule_class(name).relaxes_upward else "smaller relaxes"


def parse_allow_rules(text: str) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """``--allow-rules NAME[:LIMIT[:KNOB2]],…``: each rule known, each limit a valid knob of it (one line otherwise);
    (rule -> limit, rule -> the second knob its requests must use, where given)."""
    rules: dict[str, float | None] = {}
    seconds: dict[str, float | None] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise UserError(f"--allow-rules {text!r}: an empty entry (write NAME[:LIMIT],…)")
        try:
            named, limit = split_spec(item)
            name, second = second_knob(named)
            cls = rule_class(name)
            if limit is not None:
                cls.check_knob(limit)
        except BadValue as exc:  # the knob's refusal, its limit here
            raise UserError(f"--allow-rules {item!r}: the limit {exc.problem}") from None
        except UserError as exc:
            raise UserError(f"--allow-rules {item!r}: {exc}") from None
        if limit is not None and cls.knob_name is None:
            raise UserError(f"--allow-rules {item!r}: rule {name!r} takes no knob")
        if second is not None and limit is None:
            raise UserError(f"--allow-rules {item!r}: a second knob needs the first's limit before it")
        if name in rules:
            raise UserError(f"--allow-rules: {name!r} is listed twice")
        rules[name] = limit
        if second is not None:
            seconds[name] = second
    return rules, seconds


def parse_allow_kinds(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    kinds = tuple(part.strip() for part in text.split(","))
    for kind in kinds:
        if kind not in known:
            raise UserError(f"--allow-draft-kinds: {kind!r} is not a kind this server can draft with "
                            f"({', '.join(known)})")
    return tuple(dict.fromkeys(kinds))


def read_user(body: Mapping[str, Any]) -> str | None:
    """OpenAI's ``user`` (an end-user id): a string of at most ``MAX_USER_CHARS`` printable characters."""
    user = body.get("user")
    if user is None:
        return None
    if not isinstance(user, str):
        raise bad("user", "must be a string")
    if len(user) > MAX_USER_CHARS or not user.isprintable():
        raise bad("user", f"must be at most {MAX_USER_CHARS} printable characters")
    return user


__all__ = ["ALWAYS_ALLOWED_RULES", "DEFAULT_SCOPES", "Policy", "parse_allow_kinds", "parse_allow_rules", "read_user",
           "within"]
