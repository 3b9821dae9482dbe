"""The short Python run of `make asan`: eager ops, views and in-place writes,
a deferred index error, CPU operands, a training loop with AdamW and a
scheduler, torch.compile, and a module moved both ways, each checked against
CPU PyTorch. Under the sanitizers any memory error aborts the run."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_pjrt

print("extension:", torch_pjrt._C.__file__)
DEV = torch_pjrt.settings().device_name


def close(a, b, tol=1e-4):
    torch.testing.assert_close(a.cpu(), b, rtol=tol, atol=tol)


torch.manual_seed(0)
x = torch.randn(16, 32)
t = x.to(DEV)
close(t.exp().sum(1), x.exp().sum(1))
close((t @ t.T).softmax(-1), (x @ x.T).softmax(-1))
v = t[2:10:2, 1:5]
v.mul_(2)
xc = x.clone()
xc[2:10:2, 1:5].mul_(2)
close(t, xc)
close(t.view(torch.int32), xc.view(torch.int32), 0)
close(t[torch.tensor([1, 3])], xc[torch.tensor([1, 3])])
try:
    t.index_select(0, torch.tensor([99], device=DEV)).cpu()
    raise AssertionError("no IndexError")
except IndexError:
    pass

model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
ref = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
ref.load_state_dict(model.state_dict())
model.to(DEV)
opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref)]
scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1 / (1 + s)) for o in opts]
y = torch.randint(0, 4, (16,))
for step in range(5):
    for m, o, s, inp, tgt in ((model, opts[0], scheds[0], t, y.to(DEV)), (ref, opts[1], scheds[1], xc, y)):
        o.zero_grad()
        loss = F.cross_entropy(m(inp), tgt)
        loss.backward()
        o.step()
        s.step()
for p, q in zip(model.parameters(), ref.parameters()):
    close(p, q, 1e-3)

compiled = torch.compile(lambda a, b: (a * b).relu().sum(0), backend=DEV)
close(compiled(t, t + 1), (xc * (xc + 1)).relu().sum(0))
model.cpu()
model.to(DEV)
print("asan python smoke: ok")
