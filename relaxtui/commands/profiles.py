"""`relaxtui profiles list|show NAME`: the shipped cost profiles, or any profile file."""

from __future__ import annotations

import argparse

from relaxtui.commands.common import utf8_text
from relaxtui.costmodel.profiles import SHIPPED, CostProfile, load_profile
from relaxtui.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="profiles_command", required=True, parser_class=type(parser))
    sub.add_parser("list", help="the shipped cost profiles")
    show = sub.add_parser("show", help="every price of one profile, and the round costs it implies")
    show.add_argument("name", type=utf8_text, help="a shipped name, memory-bound:C, or a profile JSON file")
    show.add_argument("--json", action="store_true", help="print the profile as JSON (the file format)")


def describe(profile: CostProfile, drafts: range = range(0, 9)) -> str:
    """A profile's prices and, per draft length, the round cost and the break-even mean accepted length."""
    lines = [f"{profile.name}: {profile.hardware}", f"  verifier {profile.verifier}, drafter {profile.drafter}",
             f"  pricing {profile.pricing}; t_AR {profile.verifier_ar_ms:.3f} ms, t_D {profile.drafter_ms:.3f} ms "
             f"(c_rel {profile.c_rel:.3f})"]
    if profile.pricing == "optimistic":
        lines.append("  a round of d drafts costs t_AR + d × t_D (verification assumed memory-bound; t_V unused)")
    elif profile.verify_ms:
        blocks = ", ".join(f"k={k}: {ms:.3f} ms" for k, ms in sorted(profile.verify_ms.items()))
        lines.append(f"  t_V(k) measured: {blocks}")
        lines.append("  other k: k=1 is t_AR; below the first measured k, its value; between two, linear; "
                     "past the last, refused")
    extras = [f"{name} {value:.3f} ms" for name, value in (("per drafting round", profile.draft_round_ms),
                                                         ("re-sync", profile.resync_ms), ("per token", profile.emit_ms))
              if value]
    if extras:
        lines.append("  also: " + ", ".join(extras))
    if profile.source:
        lines.append(f"  source: {profile.source}")
    if profile.timing_spread is not None:  # a calibrated profile: how far its times can be trusted
        verdict = "stable" if profile.timing_stable is not False else "UNSTABLE: re-run on an idle machine"
        lines.append(f"  timings: {verdict}; widest spread of a part ±{profile.timing_spread / 2:.0%}")
    lines.append(f"  {'N':>3} {'round ms':>9} {'break-even mean accepted length':>32}")
    for n in drafts:
        try:
            lines.append(f"  {n:>3} {profile.round_cost_ms(n):9.3f} {profile.break_even_length(n):32.3f}")
        except UserError:  # past the measured block sizes: say where the profile ends
            lines.append(f"  {n:>3} {'-':>9} {'(no verify cost for k=' + str(n + 1) + ')':>32}")
            break
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.profiles_command == "list":
        for name, profile in SHIPPED.items():
            print(f"{name:24} {profile.pricing:10} {profile.hardware}")
        print("memory-bound:C           optimistic v(k) = 1, drafter = C verifier steps (C settable)")
        print("FILE                     a profile JSON, e.g. written by `relaxtui bench --save-profile FILE`")
        return 0
    profile = load_profile(args.name)
    print(profile.to_json().rstrip() if args.json else describe(profile))
    return 0
