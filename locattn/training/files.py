"""Floor 0 of a training run: the names of the files a run writes in its output directory.

Standard library only (nothing at all is imported), so that the run record (``record.layout``)
and light commands such as ``study status`` can name these files without importing torch.
"""

CONFIG_FILE = "config.json"
"""The resolved config of a run (``config_to_dict``), in its output directory."""
RESULT_FILE = "result.json"
"""The :class:`~locattn.training.results.RunResult` of a finished run."""
BEST_MODEL_FILE = "best_model.pt"
"""The selected model's ``state_dict``."""
ATTENTION_JSON = "attention.json"
"""The traced attention of one test example."""
ATTENTION_PNG = "attention.png"
"""Its heatmap."""
EXAMPLES_JSON = "examples.json"
"""Saved test predictions (``locattn.training.examples``)."""
CHECKPOINT_DIR = "checkpoint"
"""The resumable checkpoint's directory (``locattn.training.checkpoint``)."""
CHECKPOINT_STATE = "state.pt"
"""The tensors of a checkpoint, inside :data:`CHECKPOINT_DIR`."""
CHECKPOINT_META = "meta.json"
"""The JSON half of a checkpoint (epoch, identity, checksum of the state)."""
