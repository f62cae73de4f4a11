"""Airflow DAG: every night, lay out the new (and changed) days of a table into a
dataset root and commit the next generation (docs/datasets.md), then drop generations
older than a week. A run that finds nothing new exits 0 without a generation.
Retries: only exit 4 (transient) is worth retrying; 2, 3 and 5 fail the same way again
(5: another run is updating the root).

The commands are module-level lists so that cmd/relayout/examples_test.go can read
them (with Python, without Airflow) and run them as local processes.
"""

INPUT = "s3://bucket/events/"  # date=YYYY-MM-DD/ folders
DATASET = "s3://bucket/datasets/events/"

RUN_ARGS = ["run", "--dataset", DATASET, "--input", INPUT, "--slice-keys", "date,country", "--tensors",
            "--keep-partitions", "90", "--memory-limit", "6GiB"]
GC_ARGS = ["gc", DATASET, "--keep", "7"]

try:  # the DAG itself; the test reads only the lists above
    import pendulum
    from airflow.models.dag import DAG
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    IMAGE = "registry.example.com/relayout:0.1.0"  # what `make image` builds; push it to your registry

    with DAG("relayout_nightly", schedule="30 2 * * *", start_date=pendulum.datetime(2026, 1, 1),
             catchup=False, max_active_runs=1) as dag:
        run = KubernetesPodOperator(task_id="run", name="relayout-run", image=IMAGE, cmds=["relayout"],
                                    arguments=RUN_ARGS, retries=3)
        gc = KubernetesPodOperator(task_id="gc", name="relayout-gc", image=IMAGE, cmds=["relayout"],
                                   arguments=GC_ARGS, retries=3)
        run >> gc
except ImportError:
    pass
