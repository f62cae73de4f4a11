package writer

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/manifests"
)

// Sink receives a table's rows in output order and writes them out. The
// Parquet writer, the tensor writer, a Tee of both and dedupe's packing
// decorator are sinks; the partition stage feeds one without knowing
// which.
//
// A sink's contract: Write is called with rows in output order;
// EndRowGroup marks a boundary the caller chose (a sink that cuts by its
// own plan may ignore it); Finish flushes and returns what was written, as
// manifest entries; Abort, after a failure, discards what is in flight so
// that no partial object becomes visible. Neither Finish nor Abort is
// called twice, nor both.
type Sink interface {
	Write(rec arrow.RecordBatch) error
	EndRowGroup() error
	Finish() (Written, error)
	Abort()
}

// Written is what a sink wrote, as manifest entries.
type Written struct {
	Files  []manifests.File // Parquet files, in output order
	Shards []Shard          // safetensors shards, in output order
}

// Shard is a written safetensors shard: its manifest entry (Slices still
// empty: the manifest builder indexes them) and the byte sizes the report
// breaks a shard into.
type Shard struct {
	manifests.Shard
	// TensorBytes is each tensor's data bytes, in plan order (the header
	// is the manifest entry's HeaderBytes).
	TensorBytes []int64 `json:"tensor_bytes"`
}

// Tee is a sink that writes every record to each of its sinks, in order.
// Finish merges what they wrote.
type Tee []Sink

// Write implements Sink.
func (t Tee) Write(rec arrow.RecordBatch) error {
	for _, s := range t {
		if err := s.Write(rec); err != nil {
			return err
		}
	}
	return nil
}

// EndRowGroup implements Sink.
func (t Tee) EndRowGroup() error {
	for _, s := range t {
		if err := s.EndRowGroup(); err != nil {
			return err
		}
	}
	return nil
}

// Finish implements Sink: it finishes every sink, and aborts the ones
// after a sink that failed.
func (t Tee) Finish() (Written, error) {
	var all Written
	for i, s := range t {
		w, err := s.Finish()
		if err != nil {
			Tee(t[i+1:]).Abort()
			return all, err
		}
		all.Files = append(all.Files, w.Files...)
		all.Shards = append(all.Shards, w.Shards...)
	}
	return all, nil
}

// Abort implements Sink.
func (t Tee) Abort() {
	for _, s := range t {
		s.Abort()
	}
}

// Discard is a sink that writes nothing (a task with no rows to write).
type Discard struct{}

// Write implements Sink.
func (Discard) Write(arrow.RecordBatch) error { return nil }

// EndRowGroup implements Sink.
func (Discard) EndRowGroup() error { return nil }

// Finish implements Sink.
func (Discard) Finish() (Written, error) { return Written{}, nil }

// Abort implements Sink.
func (Discard) Abort() {}

var (
	_ Sink = (*Parquet)(nil)
	_ Sink = (*Tensors)(nil)
	_ Sink = Tee(nil)
)
