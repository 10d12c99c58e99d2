"""One training run, in floors: a module imports only modules on lower floors.

Read them in this order (``test_architecture.py`` checks the order):

0. ``files``: the names of the files a run writes (imports nothing).
1. ``results``: what a run produces (:class:`RunResult`), how it fails
   (:class:`NonFiniteLossError`), the files it writes, and the best-model rule; ``aot_step``
   (the compiled training step saved to disk whole, so that a later process loads it);
   ``graph_passes`` (the compiled step's product rewrites: one product per weight gradient over
   the time steps, the bias added after the product).
2. ``data`` (batching, data order), ``checkpoint`` (atomic, checksummed state; RNG seeding),
   ``recorders`` (progress without a tracking library), ``evaluate`` (teacher-forced dev
   scores, greedy decoding), ``examples`` (saved predictions), ``scoring`` (every test split
   with every metric), ``attention`` (the traced example), ``compiles`` (the compiled step's
   compiles, counted, and its one padded shape).
3. ``epoch``: one training pass of a pack of K runs; a solo run is a pack of one.
4. ``seq2seq`` (:class:`Seq2SeqRun`, one run's state and steps), ``packed`` (K runs of one cell
   trained together), ``regression`` (Raffel & Ellis), ``memory`` (the device memory of a
   graphed pack of K, from its config).
5. ``run``: ``train(cfg, out_dir)``.

The public names are re-exported by :mod:`locattn.train` and :mod:`locattn.packed`.
"""
