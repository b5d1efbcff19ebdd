"""torch's own TCPStore, driven by dcomm's tests: `python3 torch_peer.py server` hosts a
TCPStore(is_master=True) on a free port; `python3 torch_peer.py client PORT` connects a
TCPStore(is_master=False) to PORT (a dcomm TorchStoreServer). Either way it prints `PORT <n>`, then runs
one JSON command per stdin line on its own client and prints one JSON reply per line. Values travel as
hex. It exits when stdin closes.
"""
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    mode = sys.argv[1]
    if mode == "server":
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=30))
    else:
        store = dist.TCPStore("127.0.0.1", int(sys.argv[2]), is_master=False,
                              timeout=timedelta(seconds=30))
    print(f"PORT {store.port} TORCH {torch.__version__}", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "set":
                store.set(cmd["key"], bytes.fromhex(cmd["value"]))
                out = None
            elif op == "get":
                if "timeout_ms" in cmd:
                    store.set_timeout(timedelta(milliseconds=cmd["timeout_ms"]))
                out = store.get(cmd["key"]).hex()
                store.set_timeout(timedelta(seconds=30))
            elif op == "add":
                out = store.add(cmd["key"], cmd["delta"])
            elif op == "compare_set":
                out = store.compare_set(cmd["key"], bytes.fromhex(cmd["expected"]),
                                        bytes.fromhex(cmd["desired"])).hex()
            elif op == "check":
                out = store.check(cmd["keys"])
            elif op == "num_keys":
                out = store.num_keys()
            elif op == "delete":
                out = store.delete_key(cmd["key"])
            elif op == "append":
                store.append(cmd["key"], bytes.fromhex(cmd["value"]))
                out = None
            elif op == "multi_get":
                out = [v.hex() for v in store.multi_get(cmd["keys"])]
            elif op == "multi_set":
                store.multi_set(cmd["keys"], [bytes.fromhex(v) for v in cmd["values"]])
                out = None
            elif op == "wait":
                store.wait(cmd["keys"], timedelta(milliseconds=cmd["timeout_ms"]))
                out = None
            else:
                raise ValueError(f"unknown op {op}")
            reply = {"ok": out}
        except Exception as e:  # the test checks the error's text
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)


main()
