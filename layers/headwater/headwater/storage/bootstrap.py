"""Create the tables and bucket declared in schema.py (local emulators and tests; on AWS
CloudFormation creates them from template.yaml). Idempotent."""

from __future__ import annotations

import logging

from botocore.exceptions import ClientError

from headwater.settings import Settings
from headwater.storage.clients import AwsClients
from headwater.storage.schema import TABLES

log = logging.getLogger(__name__)


def ensure_resources(settings: Settings, clients: AwsClients, *, ttl: bool = True) -> None:
    """`ttl=False` leaves DynamoDB's TTL off on new tables, so nothing expires on its own:
    for tests on a fixed clock in the past, whose items a store that honours TTL (DynamoDB
    Local deletes an expired item within seconds; DynamoDB within days) may delete mid-test."""
    ddb = clients.dynamodb
    existing: set[str] = set()
    for page in ddb.get_paginator("list_tables").paginate():
        existing.update(page.get("TableNames", []))
    for table in TABLES:
        name = settings.table_name(table.logical)
        if name not in existing:
            try:
                ddb.create_table(**table.create_table_kwargs(name))
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ResourceInUseException":
                    raise
            ddb.get_waiter("table_exists").wait(
                TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 300}
            )
            if table.ttl_attribute and ttl:
                ddb.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
                )
            log.info("created table %s", name)
    bucket = settings.bucket_name
    try:
        clients.s3.head_bucket(Bucket=bucket)
    except ClientError:
        kwargs: dict[str, object] = {"Bucket": bucket}
        if settings.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": settings.region}
        clients.s3.create_bucket(**kwargs)
        log.info("created bucket %s", bucket)
