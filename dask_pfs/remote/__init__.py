"""A whole driver call as one seceded Dask task (the driver) and the side that starts and follows it (the client)."""
