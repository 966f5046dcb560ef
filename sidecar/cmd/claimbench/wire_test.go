package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWireClientSpeaksHTTP11KeepAlive(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			require.Equal(t, "Bearer k", r.Header.Get("Authorization"))
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusCreated)
			w.(http.Flusher).Flush()
			_ = body
		case "/body":
			w.Header().Set("Content-Length", "2")
			_, _ = w.Write(body[:2])
		case "/close":
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Length", "1")
			_, _ = w.Write([]byte("x"))
		case "/chunked":
			_, _ = w.Write([]byte("a"))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("b"))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := newWireClient(srv.URL, "k")
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()

	status, body, err := c.post(ctx, "/echo", []byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Empty(t, body)
	status, body, err = c.post(ctx, "/body", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, `{"`, string(body))
	require.EqualValues(t, 1, conns.Load(), "one kept-alive connection")

	_, body, err = c.post(ctx, "/close", nil)
	require.NoError(t, err)
	require.Equal(t, "x", string(body))
	_, _, err = c.post(ctx, "/body", []byte(`ab`))
	require.NoError(t, err)
	require.EqualValues(t, 2, conns.Load(), "a new connection after Connection: close")

	_, _, err = c.post(ctx, "/chunked", nil)
	require.ErrorContains(t, err, "chunked")

	_, err = newWireClient("https://example.invalid", "k")
	require.Error(t, err)
}

func TestWireClientExtraHeadersAndNoKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		if r.Header.Get("Authorization") != "" || r.Header.Get("Webhook-Id") != "msg_1" || r.Header.Get("Webhook-Timestamp") != "7" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c, err := newWireClient(srv.URL, "")
	require.NoError(t, err)
	defer c.close()
	status, _, err := c.postWith(context.Background(), "/x", []byte("webhook-id: msg_1\r\nwebhook-timestamp: 7\r\n"), []byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
}
