"""What can go wrong in storage, as types.

    StorageError
    ├── DatabaseUnavailable   the server cannot be reached or started; the operator must look
    └── MigrationError        the schema could not be brought up to date

asyncpg's own exceptions are translated at this boundary; a unique violation is not an
error here at all but a domain outcome (a duplicate), handled where it happens.
"""


class StorageError(Exception):
    """Base of every error storage raises on purpose."""


class DatabaseUnavailable(StorageError):
    """The database cannot be reached (or the embedded server cannot be started)."""


class MigrationError(StorageError):
    """A migration failed to apply; the database is left at the last good version."""
