import sys, json, time
sys.path.insert(0, "tests/api")
from test_queue import *  # noqa

def test_dbg(client):
    make_queue(client)
    produce(client, "jobs", 3)
    with client.stream("GET", "/v0/topics/jobs/work", params={"node": "w1", "max": 2}, headers=SSE) as r:
        lines = []
        n = 0
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: "):
                n += 1
                if n == 2:
                    break
        print("LINES", lines)
        for _ in range(5):
            print("C", counters(client), time.monotonic())
            time.sleep(0.3)
