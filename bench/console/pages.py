"""The console's pages as the page-speed benchmark sees them: one HTTP
connection kept open to the sidecar's admin listener (with the session
cookie the console hands every visitor, so the rounds do not open a session
per request), the timed GET of a page, the links a page offers (by rel and
by text), the checks that a page holds what it should, and the list of
page kinds with their URLs, found by walking the console as a person would.

Only the standard library: the benchmark runs before any virtualenv exists."""

from __future__ import annotations

import datetime as dt
import html.parser
import http.client
import socket
import time
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple


class Links(html.parser.HTMLParser):
    """The href of each <a>, by its rel and by its text (the first of each)."""

    def __init__(self) -> None:
        super().__init__()
        self.rel: Dict[str, str] = {}
        self.text: Dict[str, str] = {}
        self._open: Optional[str] = None
        self._words: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        a = dict(attrs)
        if tag != "a" or not a.get("href"):
            return
        self._open, self._words = a["href"], []
        for rel in (a.get("rel") or "").split():
            self.rel.setdefault(rel, a["href"] or "")

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._words.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.text.setdefault(" ".join("".join(self._words).split()), self._open)
            self._open = None


def links(body: str) -> Links:
    parser = Links()
    parser.feed(body)
    return parser


class Client:
    """A kept-alive connection to the console; reconnects when the server
    closes it (the reconnection is then inside that request's time, as it
    would be for a browser)."""

    def __init__(self, port: int):
        self.port = port
        self.cookie: Optional[str] = None
        self.conn: Optional[http.client.HTTPConnection] = None

    def get(self, path: str) -> Tuple[int, str, float]:
        """GETs `path`; its status, body and time in ms (request sent to body read)."""
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.conn.connect()
                # A request leaves in one write; Nagle's delay must not hold back the next one.
                self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            headers = {"Cookie": self.cookie} if self.cookie else {}
            t0 = time.perf_counter()
            try:
                self.conn.request("GET", path, headers=headers)
                r = self.conn.getresponse()
                body = r.read()
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt == 2:
                    raise
                continue
            ms = 1000 * (time.perf_counter() - t0)
            cookie = r.getheader("Set-Cookie")
            if cookie and not self.cookie:
                self.cookie = cookie.split(";", 1)[0]
            if r.getheader("Connection", "").lower() == "close":
                self.close()
            return r.status, body.decode(errors="replace"), ms
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# What each kind of page must hold: a marker, and the attribute each of its
# rows carries (None: no rows to count).
EXPECT = {
    "overview": ('class="namespace"', None),
    "turns": ('id="turns"', "data-turn="),
    "turn": ('id="timeline"', "data-phase="),
    "keys": ('id="keys"', "data-key="),
    "waits": ('id="waits"', "data-wait="),
}


def check(kind: str, status: int, body: str) -> Tuple[List[str], int]:
    """What is wrong with a page of `kind` (empty when nothing), and its rows."""
    problems = []
    marker, row = EXPECT[kind]
    if status != 200:
        problems.append(f"status {status}")
    if marker not in body:
        problems.append(f"no {marker}")
    rows = body.count(row) if row else 0
    if row and rows == 0:
        problems.append(f"no row ({row})")
    return problems, rows


def minute(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M")


def q(**params: Any) -> str:
    return urllib.parse.urlencode(params)


def page_list(seed: Dict[str, Any], ns: str = "default") -> List[Tuple[str, str, str]]:
    """(name, kind, path) of every page timed, but the deep pages, which
    `walk` finds by following links."""
    now = seed["now_ns"]
    day = 86_400 * 10**9
    pages = [
        ("overview", "overview", "/"),
        ("overview ns", "overview", f"/?{q(ns=ns)}"),
        ("turns", "turns", f"/turns?{q(ns=ns)}"),
        ("turns open", "turns", f"/turns?{q(ns=ns, status='open')}"),
        ("turns stalled", "turns", f"/turns?{q(ns=ns, status='open', stalled=1)}"),
        ("turns terminal", "turns", f"/turns?{q(ns=ns, status='terminal')}"),
        ("turns prefix", "turns", f"/turns?{q(ns=ns, status='all', prefix='refund-')}"),
        ("turns session", "turns", f"/turns?{q(ns=ns, status='all', session=seed['session'])}"),
        ("turns 1-day range", "turns",
         f"/turns?{q(ns=ns, status='all', **{'from': minute(now - 11 * day), 'to': minute(now - 10 * day)})}"),
        ("turn, 3 checkpoints", "turn", f"/turn?{q(ns=ns, id=seed['small_turn'])}"),
        ("turn, long: newest page", "turn", f"/turn?{q(ns=ns, id=seed['long_turn'])}"),
    ]
    for state in ("in_progress", "expired", "failed", "completed", "released", "all"):
        pages.append((f"keys {state}", "keys", f"/keys?{q(ns=ns, state=state)}"))
    for status in ("pending", "timers", "settled", "all"):
        pages.append((f"waits {status}", "waits", f"/waits?{q(ns=ns, status=status)}"))
    return pages


def follow(client: Client, path: str, link: str, times: Optional[int]) -> Tuple[str, int]:
    """The page reached from `path` by following the link `link` (a rel,
    or "text:" and the link's text) up to `times` times (None: until there
    is no such link); the path and how many links it followed."""
    followed = 0
    while times is None or followed < times:
        status, body, _ = client.get(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: status {status}")
        found = links(body)
        nxt = found.text.get(link[5:]) if link.startswith("text:") else found.rel.get(link)
        if not nxt:
            break
        path = urllib.parse.urljoin(path, nxt)
        followed += 1
    return path, followed


def walk(client: Client, seed: Dict[str, Any], deep: int, ns: str = "default") -> List[Tuple[str, str, str]]:
    """Every page timed: `page_list`'s, a turns page `deep` pages in (by
    `rel=next`) and the long turn's oldest page (by its "Older" links)."""
    pages = page_list(seed, ns)
    deep_path, went = follow(client, f"/turns?{q(ns=ns)}", "next", deep)
    pages.insert(9, (f"turns, page {went + 1} by next", "turns", deep_path))
    # The turn page's link to older checkpoints, by its text: its rel says
    # where it leads in the page sequence, which the text does not depend on.
    old_path, back = follow(client, f"/turn?{q(ns=ns, id=seed['long_turn'])}", "text:Older", None)
    at = next(i for i, p in enumerate(pages) if p[0] == "turn, long: newest page") + 1
    pages.insert(at, (f"turn, long: oldest page ({back} back)", "turn", old_path))
    return pages
