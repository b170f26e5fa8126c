package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server is an HTTP server on a local listener, for the gateway or a
// simulated replica.
type Server struct {
	// Addr is the ip:port it listens on (the port resolved if 0 was asked).
	Addr string
	srv  *http.Server
	done chan struct{}
}

// Serve listens on addr ("127.0.0.1:0" picks a free port) and serves h
// until Close.
func Serve(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.New("gateway: listen: " + err.Error())
	}
	s := &Server{Addr: ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// URL returns "http://" + Addr.
func (s *Server) URL() string { return "http://" + s.Addr }

// Close stops accepting, gives open requests a second to finish, then
// closes what is left.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
