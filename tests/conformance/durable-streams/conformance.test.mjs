// The official Durable Streams server conformance suite, run as it is against the server at
// CONFORMANCE_TEST_URL (its own CLI cannot find its test file when installed as a dependency),
// with its reserved subscription APIs (webhook and pull-wake subscriptions) included.
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

runConformanceTests({ baseUrl: process.env.CONFORMANCE_TEST_URL, subscriptions: true });
