"""Names of the MLflow run record: tags, statuses and metric keys, written by ``study`` and read
by ``reports``.

Imports only :mod:`locattn.renamed` and :mod:`locattn.registry` (standard library): the metric
keys a run records are the registry's (:func:`locattn.register_metric`), named here, not listed.
"""

from locattn import registry
from locattn.renamed import RENAMED_FIELDS

ROLE = "locattn.role"
ROLE_STUDY = "study"
ROLE_TRIAL = "trial"
ROLE_CELL = "cell"  # a cell's run: its seeds' runs nest under it; reports ignore it
STUDY = "locattn.study"
RUN_KEY = "locattn.run_key"
CELL = "locattn.cell"
HPARAMS = "locattn.hparams"
TASK = "locattn.task"
VARIANT = "locattn.variant"
SEED = "locattn.seed"
N_SEEDS = "locattn.n_seeds"
STATUS = "locattn.status"
ERROR = "locattn.error"
CODE_VERSION = "locattn.code_version"
DIRTY = "locattn.dirty"
"""``true`` on a run trained from a working tree whose package code differs from its commit
(``study launch|resume --allow-dirty``); the diff is its artifact :data:`record.layout.CODE_DIFF`."""
VERSIONS = "locattn.versions"
DEV_SCORING = "locattn.dev_scoring"
TABLES = "locattn.tables"
#: (parent) JSON list of the definitions (``locattn.table_defs.table_to_dict``) of the tables the
#: study names that are not built-ins: a spec's own tables and plugins' (reports build them from
#: the record alone). The table ids themselves live in one registry, ``locattn.table_defs``.
TABLE_DEFS = "locattn.table_defs"
MAX_TABLE_DEFS_CHARS = 5000
"""The longest :data:`TABLE_DEFS` a study may record (the record writer cuts tags at this length)."""
# Added by the study package (operational; reports may ignore them):
PROFILE = "locattn.profile"  # (parent) spec profile: smoke, quick, paper
SPEC_PATH = "locattn.spec"  # (parent) spec file the study was launched from
N_TRIALS = "locattn.n_trials"  # (parent) Tune trials the spec expands to
N_RUNS = "locattn.n_runs"  # (parent) MLflow trial runs expected
RESUMED_FROM = "locattn.resumed_from"  # (trial) epoch the latest attempt resumed from (0 = fresh)
NODE_ID = "locattn.node_id"  # (trial) Ray node id of the latest attempt
ATTEMPTS = "locattn.attempts"  # (trial) failures so far (Tune retries)
PLUGINS = "locattn.plugins"  # (trial) JSON {plugin: {distribution, version, sha256}} of the plugins its config uses
LABELS = "locattn.labels"  # (parent) JSON {"task": {name: label}, "variant": {name: label}} of its cells, recorded at launch
PACKED_WITH = "locattn.packed_with"  # (trial) seeds trained together in one packed model, "0,1,2"
PACKED_CELLS = "locattn.packed_cells"  # (trial) JSON list of the cells its trial packed together (ablation switches)

STATUS_FINISHED = "finished"
STATUS_FAILED = "failed"
STATUS_RUNNING = "running"
STATUS_INTERRUPTED = "interrupted"  # (parent) the driver was stopped with Ctrl-C; resume it
#: The status of a run that never got its ``locattn.status`` tag (killed before its first
#: report), from MLflow's own status, lower-cased; other MLflow statuses read as they are.
MLFLOW_STATUS_FALLBACK = {"killed": STATUS_FAILED, "scheduled": STATUS_RUNNING}

# test_loss / test_score: Raffel & Ellis runs under eval.regression_protocol=paper score the test
# set after every epoch (there is no dev set). mix_gate: a Mix run's mean gate over the dev set.
# compiles / compile_seconds: graphs torch.compile built or loaded in the epoch, and the wall
# seconds of the steps that did (train_path=compiled).
EPOCH_METRICS = ("train_loss", "dev_loss", "dev_score", "dev_seq_acc", "lr", "epoch_seconds",
                 "test_loss", "test_score", "mix_gate", "compiles", "compile_seconds")
_METRICS = registry.entries("metric", discover=False).values()  # the built-ins (a plugin's is per split)
# best_selection_score: the best value of the checkpoint-selection signal (dev accuracy, or minus
# the dev loss under optim.select_on=dev_loss; higher is better). Then each registered metric
# recorded once per run (record="run": epochs_to_100).
FINAL_METRICS = ("best_selection_score", "best_epoch", "epochs_run") + tuple(
    str(e.meta["key"]) for e in _METRICS if e.meta["record"] == "run")


def _headline_metrics() -> tuple[str, ...]:
    """Per task kind, in registration order, the key of its first registered accuracy recorded
    per split for every task."""
    first: dict[str, str] = {}
    for e in _METRICS:
        if e.meta["accuracy"] and e.meta["record"] == "split" and e.meta["tasks"] is None:
            first.setdefault(str(e.meta["task_kind"]), str(e.meta["key"]))
    return tuple(first.values())


#: The headline metric of a test split, the first of these a run holds: each task kind's first
#: registered accuracy (``seq_acc``; for regression tasks ``accuracy``).
HEADLINE_METRICS = _headline_metrics()

#: Metric keys that records hold under a former name: former -> current. A reader of the record
#: sees only the current names (:func:`record.store.read_rows` renames as it reads), and a spec
#: may name a metric by its former name.
RENAMED_METRICS = {"best_dev_score": "best_selection_score"}
#: Params (config paths) likewise: :data:`locattn.renamed.RENAMED_FIELDS`, their one owner.
RENAMED_PARAMS = RENAMED_FIELDS


def current_metric(key: str) -> str:
    """The current name of a metric key (itself unless :data:`RENAMED_METRICS` renames it)."""
    return RENAMED_METRICS.get(key, key)
