module github.com/shiftlock/shiftlock-proxy/itest/redislock010

go 1.26.0

replace github.com/shiftlock/shiftlock-proxy => ../..

require (
	github.com/bsm/redislock v0.10.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/shiftlock/shiftlock-proxy v0.0.0-00010101000000-000000000000
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
