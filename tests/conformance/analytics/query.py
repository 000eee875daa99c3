"""Reads a Parquet export the way analysts do, for tests/blackbox/parquet_export.rs: DuckDB runs
SQL, pyarrow reads schemas and hive-partitioned datasets. Input on stdin, JSON:
  {"sql": [SQL, ...], "schemas": [FILE, ...], "datasets": [DIR, ...]}
Output on stdout, JSON:
  {"sql": [[row, ...], ...], "schemas": [[{"name", "physical", "logical"}, ...], ...],
   "datasets": [{"rows", "columns"}, ...]}
Rows are lists; timestamps are ISO 8601 strings. A failing query raises: a non-zero exit the
test reports."""
import json
import sys

import duckdb
import pyarrow.dataset as ds
import pyarrow.parquet as pq

request = json.load(sys.stdin)
con = duckdb.connect()
answer = {"sql": [], "schemas": [], "datasets": []}
for sql in request.get("sql", []):
    answer["sql"].append([list(row) for row in con.execute(sql).fetchall()])
for path in request.get("schemas", []):
    schema = pq.ParquetFile(path).schema
    answer["schemas"].append(
        [
            {
                "name": schema.column(i).name,
                "physical": schema.column(i).physical_type,
                "logical": str(schema.column(i).logical_type),
            }
            for i in range(len(schema))
        ]
    )
for path in request.get("datasets", []):
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    answer["datasets"].append({"rows": table.num_rows, "columns": table.column_names})


def plain(v):
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


json.dump(answer, sys.stdout, default=plain)
