"""Where the parts of a run live: one module or package per --mode (docs/architecture.md, Modes).

colocated.py: everything in one process; decoupled/: sim servers, collectors and the learner
as processes over gRPC; ray/: simulator and collector actors on a Ray cluster; ddp/: the
learner as torchrun ranks over decoupled collectors."""
