"""The run record: what a study leaves behind, below both ``study`` and ``reports``.

- ``schema``: the names of the MLflow record (tags, statuses, metric keys);
- ``layout``: where a study keeps its files, and the file names of its run folders;
- ``store``: the one door into MLflow's database (SQL on SQLite or Postgres) and the only
  code that parses or redacts a tracking URI;
- ``writer``: the MLflow half of the record (the study driver's only MLflow writer);
- ``summary``: a cell's number, the median over seeds of its chosen point (standard library).

``study`` (the writer) and ``reports`` (the reader) both stand on this package and on
``locattn``, and never import each other. Nothing here imports torch, Ray or polars. Only
``writer`` imports MLflow at its top (the driver imports it); ``store`` imports MLflow and
SQLAlchemy inside the functions that read a server or a non-SQLite database, so that ``study
status`` reads a SQLite store with the standard library alone.
"""
