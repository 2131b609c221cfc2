"""The index behind the suffix drafter (``relaxtui.decoding.suffix``): an online suffix automaton with counts.

SuffixDecoding (Oliaro et al., arXiv 2411.04975; Arctic Inference's ``SuffixTree``) keeps a suffix tree of depth-
limited suffixes whose nodes count the suffixes through them, and drafts along the child with the highest count.
A suffix automaton (Blumer et al. 1985) answers the same questions with O(1) amortised work per appended token
instead of O(depth): a state is a set of substrings sharing their end positions, ``trans`` the next token, and
``count`` how many times the state's strings occur, so ``count[child] / Σ count[children]`` is the share of
earlier occurrences of a pattern followed by that token — the tree's frequency, read off the automaton.

Counts are kept exact only for states whose shortest string is at most ``depth`` tokens, all that drafting reads
(a match of at most ``depth − spec`` tokens extended by at most ``spec``): each append walks the suffix links from
the state of the text's last ``depth`` tokens (``tail``) to the root, at most ``depth`` states, so a long
periodic run (a degenerate loop) cannot make an append cost O(text). Pure Python over ``array('i')`` columns: 20
bytes a state, plus a dict only for states with two or more next tokens (most have one).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

ROOT = 0
NONE = -1  # no state
EMPTY = -(2**31)  # no token: a state with no transition yet
SEPARATOR = -1  # between two texts of one index (never a vocabulary id): a pattern never spans it, a draft stops at it


class SuffixAutomaton:
    """Every substring of the tokens appended so far, with occurrence counts (exact up to ``depth`` tokens)."""

    __slots__ = ("depth", "length", "link", "count", "first_token", "first_target", "more", "last", "size", "tail")

    def __init__(self, depth: int, tokens: Iterable[int] = ()) -> None:
        self.depth = depth
        self.length = array("i", [0])  # longest string of each state
        self.link = array("i", [NONE])  # suffix link: the state of its longest suffix that ends elsewhere too
        self.count = array("i", [0])  # occurrences (|endpos|) of its strings
        self.first_token = array("i", [EMPTY])  # the first transition inline, the rest in ``more``
        self.first_target = array("i", [NONE])
        self.more: dict[int, dict[int, int]] = {}
        self.last = ROOT  # the state of the whole text
        self.size = 0  # tokens appended
        self.tail = ROOT  # the state of the text's last min(size, depth) tokens
        self.extend(tokens)

    @property
    def states(self) -> int:
        return len(self.length)

    def goto(self, state: int, token: int) -> int:
        """The state after ``token`` from ``state`` (NONE: that string does not occur)."""
        if self.first_token[state] == token:
            return self.first_target[state]
        more = self.more.get(state)
        return more.get(token, NONE) if more else NONE

    def _set(self, state: int, token: int, target: int) -> None:
        first = self.first_token[state]
        if first == token or first == EMPTY:
            self.first_token[state] = token
            self.first_target[state] = target
        else:
            self.more.setdefault(state, {})[token] = target

    def _new(self, length: int, link: int, count: int = 0) -> int:
        self.length.append(length)
        self.link.append(link)
        self.count.append(count)
        self.first_token.append(EMPTY)
        self.first_target.append(NONE)
        return len(self.length) - 1

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        """Blumer et al.'s online step, then the depth-bounded count update."""
        length, link = self.length, self.link
        cur = self._new(length[self.last] + 1, ROOT)
        p = self.last
        while p != NONE and self.goto(p, token) == NONE:
            self._set(p, token, cur)
            p = link[p]
        if p != NONE:
            q = self.goto(p, token)
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:  # q holds longer strings too: split off the ones that now also end here
                clone = self._new(length[p] + 1, link[q], self.count[q])
                self.first_token[clone], self.first_target[clone] = self.first_token[q], self.first_target[q]
                if q in self.more:
                    self.more[clone] = dict(self.more[q])
                while p != NONE and self.goto(p, token) == q:
                    self._set(p, token, clone)
                    p = link[p]
                link[q] = link[cur] = clone
        self.last = cur
        self.size += 1
        self._count(token)

    def _count(self, token: int) -> None:
        """+1 on every state holding a suffix of at most ``depth`` tokens (the states below ``tail``): the strings of
        any state above it are longer than anything drafting reads, so their counts are left stale."""
        length, link, depth = self.length, self.link, self.depth
        if self.size <= depth:
            tail = self.last
        else:
            tail = self.tail
            while length[link[tail]] >= depth:  # the old tail was split by a clone this step
                tail = link[tail]
            if length[link[tail]] >= depth - 1:  # its suffix one token shorter
                tail = link[tail]
            tail = self.goto(tail, token)  # exists: that suffix + token ends the new text
        self.tail = tail
        count, state = self.count, tail
        while state > ROOT:
            count[state] += 1
            state = link[state]

    def repeated_suffix(self, limit: int) -> tuple[int, int]:
        """(state, length) of the longest suffix of the text, at most ``limit`` tokens, that also ends earlier in it
        (length 0: none)."""
        state = self.link[self.last] if self.tail == self.last else self.tail  # the whole-text state ends only here
        if state <= ROOT:
            return ROOT, 0
        length, link = self.length, self.link
        while length[link[state]] >= limit:
            state = link[state]
        return state, min(limit, length[state])

    def follow(self, state: int, matched: int, token: int, limit: int) -> tuple[int, int]:
        """Matching another text against this index: from (state, matched), the longest suffix of that text, at most
        ``limit`` tokens, that occurs here once ``token`` is appended to it (Blumer et al.'s matching statistics)."""
        goto, link, length = self.goto, self.link, self.length
        while state != ROOT and goto(state, token) == NONE:
            state = link[state]
            matched = length[state]
        target = goto(state, token)
        if target == NONE:
            return ROOT, 0
        if matched + 1 > limit:
            return (link[target] if length[link[target]] >= limit else target), limit
        return target, matched + 1

    def match(self, tokens: Iterable[int], limit: int) -> tuple[int, int]:
        """(state, length) of the longest suffix of ``tokens``, at most ``limit`` tokens, that occurs here."""
        state, matched = ROOT, 0
        for token in tokens:
            state, matched = self.follow(state, matched, token, limit)
        return state, matched

    def path(self, state: int, budget: int, min_prob: float) -> tuple[list[int], float]:
        """SuffixDecoding's greedy path: from ``state``, follow the most frequent next token while the product of
        their shares (the estimated probability of the draft so far) stays at least ``min_prob``, up to ``budget``
        tokens. Returns the tokens and the score (the sum of each drafted token's estimated probability)."""
        first_token, first_target, more, count = self.first_token, self.first_target, self.more, self.count
        tokens: list[int] = []
        prob, score = 1.0, 0.0
        while len(tokens) < budget:
            token = first_token[state]
            if token == EMPTY:
                break
            best, best_token = first_target[state], token
            best_count = total = count[best]
            extra = more.get(state)
            if extra:
                for token, target in extra.items():
                    n = count[target]
                    total += n
                    if n > best_count:
                        best, best_token, best_count = target, token, n
            if best_token == SEPARATOR or best_count == 0:
                break
            prob *= best_count / total
            if prob < min_prob:
                break
            tokens.append(best_token)
            score += prob
            state = best
        return tokens, score
