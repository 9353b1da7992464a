"""Taking the database back to a migration, and forward again, for the tests of a data migration."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def forward() -> None:
    """Migrate to the latest migration of every app."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def back_to():
    """``back_to(("app", "migration"))``: the database at that migration, and that state's apps.

    Whatever happened, the schema is left whole for the tests after this one.
    """
    def go(target: tuple[str, str]):
        executor = MigrationExecutor(connection)
        executor.migrate([target])
        executor.loader.build_graph()
        return executor.loader.project_state([target], at_end=True).apps

    yield go
    forward()
