"""How the REST API pages its lists."""

from rest_framework import pagination

from ..conf import API_MAX_LIMIT


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """DRF's ``?limit=&offset=`` paging, with a ceiling on ``limit``.

    Uncapped, ``?limit=10**30`` reached the database: SQLite overflowed and
    PostgreSQL refused the bigint, both as a 500. Asking for more than the
    ceiling gets the ceiling, as asking for a negative limit gets the default.
    """

    max_limit = API_MAX_LIMIT
