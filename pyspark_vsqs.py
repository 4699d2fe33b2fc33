"""Lets PySpark find the ``vsqs`` data source by itself: Spark imports
installed modules named ``pyspark_*`` and registers their ``DefaultSource``."""

from vsqs.spark import VsqsDataSource as DefaultSource

__all__ = ["DefaultSource"]
