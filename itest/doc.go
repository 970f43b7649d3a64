// Package itest holds the integration tests: the real proxy and memnode
// binaries as processes, a real redis-server, and real client libraries
// (redsync, bsm/redislock, go-redis, redis-py, redis-cli), asserting the
// values the clients return.
package itest
