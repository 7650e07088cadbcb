"""Horovod's test_horovod_allreduce_prescale values (17**dim integers, its seeded factor) through
allreduce, allreduce_ and grouped_allreduce for every dtype on CPU and GPU, at 1 rank; prints how
many elements differ from Horovod's expected result (0 everywhere is right).

    HVD_SELECTOR_NCCL_PREMULSUM=0|1 hvd-selector run -np 1 python prescale_values.py
"""

import itertools
import os

import numpy as np
import torch

import hvd_selector.torch as hvd

INTS = (torch.int32, torch.int64)
hvd.init()
devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
if torch.cuda.is_available():
    torch.cuda.set_device(0)
print("HVD_SELECTOR_NCCL_PREMULSUM", os.environ.get("HVD_SELECTOR_NCCL_PREMULSUM"), flush=True)
dtypes = (torch.int32, torch.int64, torch.float32, torch.float64, torch.float16)
for dev, dtype, dim in itertools.product(devices, dtypes, (1, 2, 3)):
    torch.manual_seed(1234)
    np.random.seed(1234)
    factor = np.random.uniform()
    tensor = torch.FloatTensor(*([17] * dim)).random_(-100, 100).to(dev).to(dtype)
    # Horovod's expectation: integers scale in float64; float16 in float16 on the GPU, float32 on the CPU
    f = torch.tensor(factor, dtype=torch.float64).to(dev)
    math = torch.float64 if dtype in INTS else (torch.float32 if dtype == torch.float16 and dev == "cpu" else dtype)
    want = (f.type(math) * tensor.type(math)).type(dtype)
    for kind in ("allreduce", "allreduce_", "grouped"):
        x = tensor.clone()
        if kind == "allreduce":
            got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor)
        elif kind == "allreduce_":
            got = hvd.allreduce_(x, op=hvd.Sum, prescale_factor=factor)
        else:
            got = hvd.grouped_allreduce([x, x.clone()], op=hvd.Sum, prescale_factor=factor)[0]
        differ = got.double() != want.double()
        if bool(differ.any()):
            i = int(differ.flatten().nonzero()[0])
            example = f"x={tensor.flatten()[i].item()} got={got.flatten()[i].item()} want={want.flatten()[i].item()}"
            print(f"{dev} {dtype} dim={dim} {kind}: {int(differ.sum())} differ, e.g. {example}", flush=True)
print("done", flush=True)
hvd.shutdown()
