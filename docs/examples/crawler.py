"""A web crawler as a work queue: one queue actor hands out URLs to a mesh of
crawlers, which add the links they find back to it. The "web" is a dict in
this file, so the example needs no network."""

from collections import deque

from monarch.actor import Actor, Port, current_rank, endpoint, this_host

CRAWLERS = 3
START = "https://example.test/"

# The fake web: each page's URL and the links on it. 1 home page, 4 sections,
# 3 articles per section; every article links back home and to its neighbour.
WEB: dict[str, list[str]] = {START: [f"{START}s{s}/" for s in range(4)]}
for s in range(4):
    section = f"{START}s{s}/"
    articles = [f"{section}a{a}" for a in range(3)]
    WEB[section] = [*articles, START]
    for a, article in enumerate(articles):
        WEB[article] = [START, articles[(a + 1) % 3]]


class Queue(Actor):
    """Hands out each URL once. A crawler that asks while the queue is empty
    waits; when the queue is empty and no crawler is busy, the crawl is over
    and every waiting crawler gets None."""

    def __init__(self) -> None:
        self.todo: deque[str] = deque()
        self.seen: set[str] = set()
        self.busy = 0
        self.waiting: deque[Port[str | None]] = deque()

    @endpoint
    def add(self, urls: list[str]) -> None:
        for url in urls:
            if url not in self.seen:
                self.seen.add(url)
                self.todo.append(url)
        self._hand_out()

    @endpoint(explicit_response_port=True)
    def take(self, port: Port[str | None]) -> None:
        # explicit_response_port: we answer later, through `port`, not by returning
        self.waiting.append(port)
        self._hand_out()

    @endpoint
    def done(self) -> None:
        self.busy -= 1
        self._hand_out()

    def _hand_out(self) -> None:
        while self.waiting and self.todo:
            self.busy += 1
            self.waiting.popleft().send(self.todo.popleft())
        if not self.todo and self.busy == 0:
            while self.waiting:
                self.waiting.popleft().send(None)  # nothing left anywhere: stop


class Crawler(Actor):
    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    @endpoint
    def crawl(self) -> list[str]:
        fetched = []
        while (url := self.queue.take.call_one().get()) is not None:
            links = WEB.get(url, [])  # a real crawler would download and parse the page here
            fetched.append(url)
            self.queue.add.call_one(links).get()  # add before done: the queue must not end early
            self.queue.done.call_one().get()
        print(f"crawler {current_rank().rank} fetched {len(fetched)} pages", flush=True)
        return fetched


procs = this_host().spawn_procs(per_host={"procs": CRAWLERS})
queue_proc = this_host().spawn_procs()  # the queue gets a process of its own
queue = queue_proc.spawn("queue", Queue)
crawlers = procs.spawn("crawlers", Crawler, queue)

queue.add.call_one([START]).get()
fetched = crawlers.crawl.call().get()  # every crawler runs until the queue says stop

pages = [url for urls in fetched.values() for url in urls]
print(f"{len(pages)} pages fetched by {CRAWLERS} crawlers")
assert sorted(pages) == sorted(WEB), "every page fetched exactly once"
procs.stop().get()
queue_proc.stop().get()
print("crawler: ok")
