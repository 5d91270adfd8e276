"""A rank's side of a gang: joining the process group before the subject's sharded hooks run
(in the worker, which is the subject's process). The runner's side is `gang`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

__all__ = ["join"]


def join(dist: Mapping[str, Any]) -> Any:
    """Join the gang's process group; the 1-D device mesh over it, handed to sharding hooks."""
    import torch
    import torch.distributed as td
    from torch.distributed.device_mesh import init_device_mesh

    rank, world, device = int(dist["rank"]), int(dist["world"]), str(dist["device"])
    torch.set_num_threads(max(1, int(dist["threads"])))
    timeout = timedelta(seconds=float(dist["timeout"]))
    client = td.TCPStore("127.0.0.1", int(dist["port"]),  # type: ignore[attr-defined]
                         is_master=False, timeout=timeout)
    store = td.PrefixStore(str(dist["prefix"]), client)  # type: ignore[attr-defined]
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        td.init_process_group("nccl", store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        options = td.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._timeout = timeout
        # gloo's own choice of interface may be a public one: loopback only.
        options._devices = [td.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        td.init_process_group("gloo", store=store, rank=rank, world_size=world,
                              pg_options=options, timeout=timeout)
    mesh = init_device_mesh(device, (world,))
    everyone = torch.ones(1, device=device)
    td.all_reduce(everyone)  # ready only once every rank is
    if int(everyone.item()) != world:
        raise RuntimeError(f"the warm-up all_reduce gave {everyone.item()}, not {world}")
    return mesh
