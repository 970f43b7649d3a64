package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// echoSize is the size of one echo message: that of a 16-byte Read's request
// and reply frames, the smallest verb round trip.
const echoSize = 32

// serveEcho is the physical floor: the least any request/response protocol
// can do over loopback, one message back for each message in.
func serveEcho(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "echo listening on %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			var buf [echoSize]byte
			for {
				if _, err := io.ReadFull(c, buf[:]); err != nil {
					return
				}
				if _, err := c.Write(buf[:]); err != nil {
					return
				}
			}
		}()
	}
}

// echoLatency measures round trips with one message outstanding.
func echoLatency(addr string, samples int) (med, p99 time.Duration, err error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	var buf [echoSize]byte
	rt := func() error {
		if _, err := c.Write(buf[:]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf[:])
		return err
	}
	for i := 0; i < samples/10+100; i++ {
		if err := rt(); err != nil {
			return 0, 0, err
		}
	}
	h := newHist()
	for i := 0; i < samples; i++ {
		t0 := time.Now()
		if err := rt(); err != nil {
			return 0, 0, err
		}
		_ = h.RecordValue(int64(time.Since(t0)))
	}
	return time.Duration(h.ValueAtQuantile(50)), time.Duration(h.ValueAtQuantile(99)), nil
}
