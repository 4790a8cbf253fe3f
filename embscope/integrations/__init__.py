"""embscope inside a training loop.

:class:`embscope.integrations.transformers.EmbscopeCallback` is a ``transformers.TrainerCallback``
(``Trainer``, TRL's ``SFTTrainer`` and ``DPOTrainer``, PEFT models): ``check``'s findings on the
trainer's own batches before the first step, the rows that matter watched every N steps, and
``diff``'s report at the end. Modules, in the order the callback uses them:

- :mod:`~embscope.integrations.live`: the rows of a model that is training (PEFT wrappers merged
  row by row), their norms, and a slim copy of its matrices as a model folder;
- :mod:`~embscope.integrations.batches`: collated batches (``input_ids``, ``labels``) → the check's
  counts and findings;
- :mod:`~embscope.integrations.watch`: the watched rows, each check's figures and what they call for;
- :mod:`~embscope.integrations.transformers`: the callback.

Nothing here is imported by ``import embscope``; importing the callback imports transformers.
"""
