package elemkind

import (
	"reflect"
	"testing"
)

// Of names every element type as reflect does, named types by their
// underlying kind.
func TestOfIsReflectKind(t *testing.T) {
	type meters float64
	type count uint16
	check := func(name string, got, want reflect.Kind) {
		t.Helper()
		if got != want {
			t.Errorf("Of[%s] = %v, want %v", name, got, want)
		}
	}
	check("int8", Of[int8](), reflect.Int8)
	check("int16", Of[int16](), reflect.Int16)
	check("int32", Of[int32](), reflect.Int32)
	check("int64", Of[int64](), reflect.Int64)
	check("int", Of[int](), reflect.Int)
	check("uint8", Of[uint8](), reflect.Uint8)
	check("uint16", Of[uint16](), reflect.Uint16)
	check("uint32", Of[uint32](), reflect.Uint32)
	check("uint64", Of[uint64](), reflect.Uint64)
	check("uint", Of[uint](), reflect.Uint)
	check("uintptr", Of[uintptr](), reflect.Uintptr)
	check("float32", Of[float32](), reflect.Float32)
	check("float64", Of[float64](), reflect.Float64)
	check("complex64", Of[complex64](), reflect.Complex64)
	check("complex128", Of[complex128](), reflect.Complex128)
	check("meters", Of[meters](), reflect.Float64)
	check("count", Of[count](), reflect.Uint16)
}
