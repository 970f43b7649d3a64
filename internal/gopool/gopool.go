// Package gopool runs functions on goroutines that are kept for reuse.
//
// A goroutine starts with a small stack and copies it each time it grows.
// The proxy's blocking paths (an acquire that waits or is forwarded to a
// key's home proxy, a release that hands over, a route message) run deep
// call chains, fabric calls under lock-table calls, so a fresh goroutine
// for each one grows its stack two or three times before it returns: on a
// proxy routing a RedLock quorum that copying was 9% of its CPU. A
// goroutine taken from the pool keeps the stack it grew, until a garbage
// collection finds it idle and shrinks it.
//
// The pool never makes a caller wait: with no idle goroutine, Go starts a
// new one, as the go statement would. A function may block for as long as
// it likes.
package gopool

import "sync/atomic"

// MaxIdle is how many goroutines wait for work at most; one that finishes
// while as many are idle exits.
const MaxIdle = 256

var (
	work = make(chan func())
	idle atomic.Int32
)

// Go runs f on an idle goroutine of the pool, or on a new one.
func Go(f func()) {
	select {
	case work <- f:
	default:
		go worker(f)
	}
}

func worker(f func()) {
	for {
		f()
		if idle.Add(1) > MaxIdle {
			idle.Add(-1)
			return
		}
		f = <-work
		idle.Add(-1)
	}
}

// Idle reports how many goroutines wait for work (tests and metrics).
func Idle() int { return int(idle.Load()) }
