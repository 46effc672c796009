"""The acceleration wing: how zoo computes faster, beside the algorithms, never inside them.

The algorithm modules (``zoo/policies/<algorithm>.py``) import nothing from here; the family bases apply it
(``OffPolicyPolicy``, ``OnPolicyLearning``, ``ActorCriticPolicy``) and a network that needs a fast path declares it
next to its ``forward`` (``zoo.policies.continuous_networks``). Its rooms:

- ``compiled``: one compiled learning step (``torch.compile``), eager as reference and fallback; ``policy.compile``.
- ``onpolicy``: the on-policy learners' compile decision and the shapes one graph needs.
- ``flat_views``: a compiled step's view of networks whose parameters live in flat buffers.
- ``matmul``: float32 products through oneDNN where the CPU takes them faster than torch's default.
- ``numpy_acting``: acting and valuing small networks in numpy (on-policy rollouts, off-policy steps).
- ``recurrent_scan``: a recurrent core's unroll in compiled loops with the episode resets inside (LSTM, GRU);
  ``recurrent_kernels``: the calls into those loops; ``recurrent_ops``: the same as custom ops, for a compiled step.
- ``numpy_memory``: acting with a recurrent core in numpy.
- ``precision``: bf16 learning (``policy.precision``), and the CPU's instruction sets.
- ``replay_storage``: the replay's columns on the learner's device, for a step that gathers its own minibatches.
- ``settings``: the process-wide settings, from the run's ``accel`` config section, made once per process.
- ``torch_internals``: every private torch API the wing uses, behind one version gate.

Figures (what each path gains, on which CPU) live in docs/speed.md, measured by the scripts in ``benchmarks/``.
"""
