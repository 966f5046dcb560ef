package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// redisDeletePrefix deletes every key matching prefix+"*" in the Redis at
// addr, speaking just enough RESP (SCAN and DEL) to clean up after a
// queue-mode run. It returns the number of keys deleted.
func redisDeletePrefix(addr, prefix string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	deleted := 0
	cursor := "0"
	for {
		reply, err := redisDo(conn, r, "SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			return deleted, err
		}
		parts, ok := reply.([]any)
		if !ok || len(parts) != 2 {
			return deleted, fmt.Errorf("redis SCAN: unexpected reply %v", reply)
		}
		cursor, _ = parts[0].(string)
		keys, _ := parts[1].([]any)
		if len(keys) > 0 {
			args := []string{"DEL"}
			for _, k := range keys {
				s, _ := k.(string)
				args = append(args, s)
			}
			n, err := redisDo(conn, r, args...)
			if err != nil {
				return deleted, err
			}
			if c, ok := n.(int); ok {
				deleted += c
			}
		}
		if cursor == "0" || cursor == "" {
			return deleted, nil
		}
	}
}

// redisDo sends one command and reads its reply: string (simple or bulk),
// int, nil or []any.
func redisDo(conn net.Conn, r *bufio.Reader, args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return redisRead(r)
}

func redisRead(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("redis: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.Atoi(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			v, err := redisRead(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
