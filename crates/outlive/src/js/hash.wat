;; The capture script's content hash, for storage read on a fresh document: V8 runs a new
;; document's JavaScript in its interpreter at first, so a JavaScript hash over a megabyte
;; costs tens of milliseconds there; this module is compiled in microseconds and hashes a
;; megabyte in well under one.
;;
;; One instance per document, its memory a fixed 256 KiB window: the script streams the
;; bytes through it (`r` starts a hash, each `h(n)` adds memory bytes [0, n), n a multiple of
;; 8, and answers the state so far), so hashing any amount of storage never grows a page's
;; memory nor reserves a new WebAssembly memory per hash. The bytes are read as 64-bit
;; little-endian words in two independent lanes, each a multiply-rotate chain. Only equality
;; of results matters (is this part the one outlive holds?), so there is no finalisation.
;; The bytes in `hash.wasm.b64` are this text assembled (the `wat` crate; a unit test keeps
;; the two in step).
(module
  (memory (export "m") 4 4)
  (global $a (mut i64) (i64.const 0))
  (global $b (mut i64) (i64.const 0))
  (func (export "r")
    (global.set $a (i64.const 0x9E3779B97F4A7C15))
    (global.set $b (i64.const 0xC2B2AE3D27D4EB4F)))
  (func (export "h") (param $n i32) (result i64 i64)
    (local $p i32) (local $w i64) (local $a i64) (local $b i64)
    (local.set $a (global.get $a))
    (local.set $b (global.get $b))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $n)))
        (local.set $w (i64.load (local.get $p)))
        (local.set $a
          (i64.mul
            (i64.rotl
              (i64.xor (local.get $a) (i64.mul (local.get $w) (i64.const 0x87C37B91114253D5)))
              (i64.const 31))
            (i64.const 0x4CF5AD432745937F)))
        (local.set $b
          (i64.mul
            (i64.rotl
              (i64.add (local.get $b) (i64.mul (local.get $w) (i64.const 0x165667B19E3779F9)))
              (i64.const 29))
            (i64.const 0x9E3779B97F4A7C15)))
        (local.set $p (i32.add (local.get $p) (i32.const 8)))
        (br $next)))
    (global.set $a (local.get $a))
    (global.set $b (local.get $b))
    (local.get $a)
    (local.get $b)))
