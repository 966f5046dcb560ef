package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// wireClient is the claims cells' HTTP/1.1 client: one keep-alive
// connection, requests written whole, responses read by Content-Length.
// It costs a small part of what net/http costs per request, so that on a
// small machine the load generator takes as little CPU from claimd and
// PostgreSQL as pgbench takes (a C client) on its side of the comparison.
// It speaks only what claimd answers (Content-Length bodies, no chunking)
// and fails loudly on anything else.
type wireClient struct {
	addr, auth string
	conn       net.Conn
	r          *bufio.Reader
	req        []byte
	body       []byte
}

// newWireClient returns a client for baseURL ("http://host:port") that
// sends key as a bearer token (none when key is empty).
func newWireClient(baseURL, key string) (*wireClient, error) {
	addr, ok := strings.CutPrefix(baseURL, "http://")
	if !ok {
		return nil, fmt.Errorf("wire client: %q is not an http:// URL", baseURL)
	}
	c := &wireClient{addr: addr}
	if key != "" {
		c.auth = "Bearer " + key
	}
	return c, nil
}

func (c *wireClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// post sends body to path and returns the status and the response body
// (valid until the next call).
func (c *wireClient) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	return c.postWith(ctx, path, nil, body)
}

// postWith is post with extra header lines ("Name: value\r\n" each).
func (c *wireClient) postWith(ctx context.Context, path string, headers, body []byte) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.r = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	_ = c.conn.SetDeadline(time.Now().Add(time.Minute))
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.addr...)
	c.req = append(c.req, "\r\n"...)
	if c.auth != "" {
		c.req = append(c.req, "Authorization: "...)
		c.req = append(c.req, c.auth...)
		c.req = append(c.req, "\r\n"...)
	}
	c.req = append(c.req, headers...)
	c.req = append(c.req, "Content-Type: application/json\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if _, err := c.conn.Write(c.req); err != nil {
		c.close()
		return 0, nil, err
	}
	status, resp, err := c.read()
	if err != nil {
		c.close()
	}
	return status, resp, err
}

// read reads one response.
func (c *wireClient) read() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, errors.New("wire client: not an HTTP/1.1 status line")
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, errors.New("wire client: bad status code")
	}
	length, closing := -1, false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, errors.New("wire client: bad header line")
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, errors.New("wire client: bad Content-Length")
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, errors.New("wire client: chunked responses are not spoken")
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closing = true
		}
	}
	if length < 0 {
		return 0, nil, errors.New("wire client: response without Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, nil, err
	}
	if closing {
		c.close()
	}
	return status, c.body, nil
}
