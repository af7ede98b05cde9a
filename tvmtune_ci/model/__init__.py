"""Models: a whole network built with the committed logs and profiled (TVM side).

- `calls`: a model's Relax module and its operator calls (`load_model`, `model_calls`),
  and their coverage by the templates' contracts;
- `build`: the covered calls swapped for their templates' best kernels, the rest
  scheduled, the VM executable (`ModelBuild`);
- `metaschedule`: MetaSchedule alone over a whole model at given runner seconds, each
  search's conditions recorded (the anchor beside the build);
- `timing`: per-call and end-to-end timing, in a fresh process on the target's cores;
- `profile`: one `tvmtune-ci profile` run, put together from the above.

The TVM-free halves stay in core (the contract, the coverage file, the profile file),
so `check` and `status` read them without TVM. Importing this package imports nothing.
"""
