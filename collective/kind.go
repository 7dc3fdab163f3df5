package collective

import (
	"fmt"
	"reflect"

	"github.com/goshmem/goshmem/internal/elemkind"
	"github.com/goshmem/goshmem/shmem"
)

// kind is the machine type under a shmem.Elem type: a named type such as
// `type Meters float64` reduces as its underlying float64. int, uint and
// uintptr are 64 bits on every platform goshmem runs on.
type kind uint8

const (
	kInt8 kind = iota + 1
	kInt16
	kInt32
	kInt64
	kUint8
	kUint16
	kUint32
	kUint64
	kFloat32
	kFloat64
	kComplex64
	kComplex128
)

// kindOf is T's kind (internal/elemkind: no call into reflect for the
// predeclared types).
func kindOf[T shmem.Elem]() kind {
	switch elemkind.Of[T]() {
	case reflect.Int8:
		return kInt8
	case reflect.Int16:
		return kInt16
	case reflect.Int32:
		return kInt32
	case reflect.Int64, reflect.Int:
		return kInt64
	case reflect.Uint8:
		return kUint8
	case reflect.Uint16:
		return kUint16
	case reflect.Uint32:
		return kUint32
	case reflect.Uint64, reflect.Uint, reflect.Uintptr:
		return kUint64
	case reflect.Float32:
		return kFloat32
	case reflect.Float64:
		return kFloat64
	case reflect.Complex64:
		return kComplex64
	case reflect.Complex128:
		return kComplex128
	}
	panic("collective: a shmem.Elem type of unknown kind " + reflect.TypeFor[T]().String())
}

func (k kind) isFloat() bool   { return k == kFloat32 || k == kFloat64 }
func (k kind) isComplex() bool { return k == kComplex64 || k == kComplex128 }

func (k kind) String() string {
	names := [...]string{"?", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
		"float32", "float64", "complex64", "complex128"}
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}
