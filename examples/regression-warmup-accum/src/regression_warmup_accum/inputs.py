"""The error every task's data raises for input that cannot be read or used."""


class DataError(ValueError):
    """Data that cannot be read or used, with the file and place named."""
