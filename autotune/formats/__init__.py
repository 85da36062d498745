"""Writers of other tools' files: one plan in, training configs out
(:mod:`autotune.formats.export` and one module per target). The Hugging
Face `config.json` reader sits below, in :mod:`autotune.hf_config`, because
`autotune.loading` (plumbing) resolves `model:` paths and may not import
this layer.

Nothing here imports the tools themselves: the writers emit their key
names, cited to the tools' sources.
"""
