"""Job 2's rules, pure data: which subscriptions pull (`plans`, `whatif`), how getMessage pages a queue (`paging`),
one queue's replay as decision rows (`rows`) and as the compact output (`matrix`), one subscription's pull from the
store's own files (`from_store`), the statistics (`stats`) and the plain words (`explain`)."""
