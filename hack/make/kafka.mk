# The Apache Kafka broker the tests run (internal/testkit/kafkatest): jars
# from Maven Central, fetched once by hack/kafka/fetch.sh into
# $(FLOWLENS_CACHE)/kafka/<version> (the version is hack/kafka/pom.xml's).
# Included by the top-level Makefile.

.PHONY: kafka-assets

kafka-assets: ## fetch the Kafka broker's jars for the tests (cached; ~20 s cold, needs Java 17 and mvn)
	@hack/kafka/fetch.sh >/dev/null

# `make deps-test` (and so `make test`) fetches them.
deps-test: kafka-assets

# `make bench` runs the Kafka exporter's benchmark against a local broker.
BENCH_PKGS += ./internal/agent/exporter/kafka
bench: kafka-assets
