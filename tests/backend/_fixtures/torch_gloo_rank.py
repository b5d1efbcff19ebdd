"""A torch.distributed rank under dcomm's launcher with --store-protocol torch: init_process_group with
env:// joins the store the launcher serves (as it would torchrun's agent store), then all-reduces its
rank + 1 with gloo and prints RESULT {json}."""
import json
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("RESULT " + json.dumps({"rank": dist.get_rank(), "size": dist.get_world_size(), "sum": t.item()}), flush=True)
dist.destroy_process_group()
