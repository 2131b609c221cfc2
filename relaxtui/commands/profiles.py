"""`relaxtui profiles list|show NAME`: the shipped cost profiles, or any profile file."""

from __future__ import annotations

import argparse
from pathlib import Path

from relaxtui.commands.common import utf8_text
from relaxtui.costmodel.pricing import break_even
from relaxtui.costmodel.profiles import SHIPPED, THIS_MACHINE, CostProfile, load_profile
from relaxtui.display import one_line
from relaxtui.errors import UserError
from relaxtui.evals.run.results import MEASURED_PROFILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="profiles_command", required=True, parser_class=type(parser))
    sub.add_parser("list", help="the shipped cost profiles, and this-machine's measurements")
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
            even = break_even(profile, n)
            shown = (f"{even.steps:.3f}" if even.reachable or n == 0  # N=0 is the verifier alone: 1 by definition
                     else f"never (needs {even.steps:.3f}, max {n + 1})")
            lines.append(f"  {n:>3} {profile.round_cost_ms(n):9.3f} {shown:>32}")
        except UserError:  # past the measured block sizes: say where the profile ends
            lines.append(f"  {n:>3} {'-':>9} {'(no verify cost for k=' + str(n + 1) + ')':>32}")
            break
    if any("never (needs" in line for line in lines):
        lines.append("  never = a round of N drafts yields at most N+1 tokens, so no acceptance rate makes N pay "
                     "under this profile")
    return "\n".join(lines)


RESULTS = Path("results")  # where eval and tune put their run folders unless --out says otherwise


def measured_here(root: Path = RESULTS) -> list[Path]:
    """The this-machine profiles that eval and tune runs measured under ``root`` (each kept in its run folder),
    newest first."""
    try:
        found = [path for path in root.glob(f"**/{MEASURED_PROFILE}") if path.is_file()]
        return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)
    except OSError:  # a folder that cannot be searched: as if none were there
        return []


def this_machine_lines(found: list[Path], root: Path = RESULTS) -> list[str]:
    """What `this-machine` is, whether it has been measured here yet, and where each measurement lives."""
    pad = " " * 36
    lines = [f"{THIS_MACHINE:24} {'measured':10} this computer, measured by each eval or tune run at its start and "
             f"kept in its run folder (DIR/{MEASURED_PROFILE})"]
    where = f"under ./{root}/ (eval and tune's default --out)"
    if found:
        folders = f"{len(found)} run folder{'s' * (len(found) != 1)}"
        lines.append(f"{pad}measured here: {folders} {where}; newest: `relaxtui profiles show {one_line(found[0])}`")
    else:
        lines.append(f"{pad}not measured yet: no run folder {where}; `relaxtui eval TASK` or `relaxtui tune TASK` "
                     "measures it (`bench --save-profile FILE` writes one too)")
    return lines


def run(args: argparse.Namespace) -> int:
    if args.profiles_command == "list":
        for name, profile in SHIPPED.items():
            print(f"{name:24} {profile.pricing:10} {profile.hardware}")
        print("memory-bound:C           optimistic v(k) = 1, drafter = C verifier steps (C settable)")
        print("\n".join(this_machine_lines(measured_here())))
        print("FILE                     a profile JSON, e.g. written by `relaxtui bench --save-profile FILE`")
        return 0
    profile = load_profile(args.name)
    print(profile.to_json().rstrip() if args.json else describe(profile))
    return 0
