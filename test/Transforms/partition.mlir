// RUN: fsdp-opt %s -split-input-file -fsdp-partition -verify-diagnostics | FileCheck %s
// fsdp-partition turns a program annotated with tensor-parallel styles
// (dist.tp, as fsdp-tp-plan writes them) into the per-rank one: column
// parallel weights keep their rank's rows, row-parallel ones their columns;
// replicated values entering per-rank computation pass through dist.copy and
// row-parallel outputs through one all_reduce; reshapes follow the heads.

dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %wq: tensor<8x8xf32> {nn.param = "layer.self_attn.q_proj.weight"},
                   %bq: tensor<8xf32> {nn.param = "layer.self_attn.q_proj.bias"},
                   %norm: tensor<4xf32> {nn.param = "layer.self_attn.q_norm.weight"},
                   %wo: tensor<8x8xf32> {nn.param = "layer.self_attn.o_proj.weight"})
    -> (tensor<2x4x8xf32> {nn.output = "y"}) {
  %q = nn.linear %x, %wq, %bq {path = "layer.self_attn.q_proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "layer.self_attn.q_proj">} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h = nn.reshape %q to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %n = nn.rms_norm %h, %norm {eps = 1.0e-6 : f64} : (tensor<2x4x2x4xf32>, tensor<4xf32>) -> tensor<2x4x2x4xf32>
  %m = nn.reshape %n to [2, 4, 8] : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %y = nn.linear %m, %wo {path = "layer.self_attn.o_proj", dist.tp = #dist.tp<rowwise, input = shard(-1), output = replicate, use_local_output = true, entry = "layer.self_attn.o_proj">} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32> {nn.input = "x"}
// CHECK-SAME: %[[WQ:[^:]+]]: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[tp], []]>, nn.param = "layer.self_attn.q_proj.weight"}
// CHECK-SAME: %[[BQ:[^:]+]]: tensor<4xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[tp]]>
// CHECK-SAME: %[[NORM:[^:]+]]: tensor<4xf32> {nn.param = "layer.self_attn.q_norm.weight"}
// CHECK-SAME: %[[WO:[^:]+]]: tensor<8x4xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [tp]]>
// CHECK: %[[XC:.+]] = dist.copy %[[X]] on @mesh[tp] : tensor<2x4x8xf32>
// CHECK: %[[Q:.+]] = nn.linear %[[XC]], %[[WQ]], %[[BQ]] {{.*}} -> tensor<2x4x4xf32>
// CHECK: %[[H:.+]] = nn.reshape %[[Q]] to [2, 4, 1, 4] : tensor<2x4x4xf32> -> tensor<2x4x1x4xf32>
// CHECK: %[[NC:.+]] = dist.copy %[[NORM]] on @mesh[tp] : tensor<4xf32>
// CHECK: nn.rms_norm %[[H]], %[[NC]]
// CHECK: nn.reshape %{{.+}} to [2, 4, 4] : tensor<2x4x1x4xf32> -> tensor<2x4x4xf32>
// CHECK: %[[P:.+]] = nn.linear %{{.+}}, %[[WO]] {{.*}} -> tensor<2x4x8xf32>
// CHECK: %[[Y:.+]] = dist.all_reduce %[[P]] on @mesh[tp] sum : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
// CHECK: return %[[Y]]
// CHECK-NOT: dist.tp

// -----

// A fused [Q | K | V] Conv1D (x · W + b, then split in three): each third is
// split over tp (groups = 3), so the split yields the rank's heads of each.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %w: tensor<8x24xf32> {nn.param = "attn.c_attn.weight"},
                   %b: tensor<24xf32> {nn.param = "attn.c_attn.bias"})
    -> (tensor<2x4x8xf32> {nn.output = "q"}, tensor<2x4x8xf32> {nn.output = "v"}) {
  %y = nn.matmul %x, %w {path = "attn.c_attn", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "attn.c_attn">} : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
  %z = nn.add %y, %b {path = "attn.c_attn", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "attn.c_attn">} : (tensor<2x4x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  %q, %k, %v = nn.split %z dim 2 sizes [8, 8, 8] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return %q, %v : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: tensor<8x12xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [tp]], groups = [1, 3]>
// CHECK-SAME: tensor<12xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[tp]], groups = [3]>
// CHECK-SAME: -> (tensor<2x4x4xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [], [tp]]>, nn.output = "q"}
// CHECK: nn.matmul {{.*}} -> tensor<2x4x12xf32>
// CHECK: nn.add {{.*}} -> tensor<2x4x12xf32>
// CHECK: nn.split %{{.+}} dim 2 sizes [4, 4, 4]

// -----

// Sequence parallel: the embedding is vocabulary-parallel and
// reduce-scattered onto sequence blocks, the norm runs on the rank's block,
// which is gathered before the column-parallel projection.
dist.mesh @mesh(tp = 2)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "ids"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight"},
                   %g: tensor<8xf32> {nn.param = "norm.weight"},
                   %w: tensor<8x8xf32> {nn.param = "proj.weight"})
    -> (tensor<2x4x8xf32> {nn.output = "y"}) {
  %e = nn.embedding %table, %ids {path = "embed", dist.tp = #dist.tp<rowwise, input = replicate, output = shard(1), use_local_output = false, entry = "embed">} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %n = nn.rms_norm %e, %g {eps = 1.0e-6 : f64, path = "norm", dist.tp = #dist.tp<sequence_parallel, input = shard(1), output = shard(1), use_local_output = false, entry = "norm">} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %y = nn.linear %n, %w {path = "proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "proj">} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
// CHECK-LABEL: func.func @forward(
// CHECK: %[[K:.+]] = dist.axis_index @mesh[tp] : tensor<i64>
// CHECK: %[[E:.+]] = nn.embedding %{{.+}}, %{{.+}}, %[[K]] {{.*}} : (tensor<8x8xf32>, tensor<2x4xi64>, tensor<i64>) -> tensor<2x4x8xf32>
// CHECK: %[[S:.+]] = dist.reduce_scatter %[[E]] on @mesh[tp] sum dim 1 : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[GC:.+]] = dist.copy %{{.+}} on @mesh[tp] : tensor<8xf32>
// CHECK: %[[N:.+]] = nn.rms_norm %[[S]], %[[GC]] {{.*}} -> tensor<2x2x8xf32>
// CHECK: %[[A:.+]] = dist.all_gather %[[N]] on @mesh[tp] dim 1 : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
// CHECK: nn.linear %[[A]], %{{.+}} {{.*}} -> tensor<2x4x4xf32>

// -----

// A cross-entropy of vocabulary-sharded logits never gathers them.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"},
                   %labels: tensor<2xi64> {nn.input = "labels"},
                   %w: tensor<16x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.linear %x, %w {path = "lm_head", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = false, entry = "lm_head">} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %loss = nn.cross_entropy %l, %labels {path = "loss"} : (tensor<2x16xf32>, tensor<2xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @forward(
// CHECK: %[[L:.+]] = nn.linear {{.*}} -> tensor<2x8xf32>
// CHECK: %[[K:.+]] = dist.axis_index @mesh[tp]
// CHECK: %[[M:.+]] = nn.reduce_max %[[L]] {{.*}} : tensor<2x8xf32> -> tensor<2xf32>
// CHECK: %[[MAX:.+]] = dist.all_reduce %[[M]] on @mesh[tp] max
// CHECK: %[[SE:.+]], %[[TG:.+]] = nn.cross_entropy_partial %[[L]], %{{.+}}, %[[MAX]], %[[K]]
// CHECK: %[[E:.+]] = dist.all_reduce %[[SE]] on @mesh[tp] sum : tensor<2xf32>
// CHECK: %[[T:.+]] = dist.all_reduce %[[TG]] on @mesh[tp] sum : tensor<2xf32>
// CHECK: nn.cross_entropy_combine %[[E]], %[[T]], %{{.+}} {path = "loss"} : {{.*}} -> tensor<f32>
// CHECK-NOT: dist.all_gather

// -----

dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<5x8xf32> {nn.param = "w"}) -> tensor<2x5xf32> {
  // expected-error @+1 {{'nn.linear' op weight 'tensor<5x8xf32>' dim 0 does not divide by tp = 2}}
  %y = nn.linear %x, %w {path = "mlp.up_proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "mlp.*_proj">} : (tensor<2x8xf32>, tensor<5x8xf32>) -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}

// -----

// A rowwise projection whose input is replicated but whose style declares it
// sharded: torch would read a replica as a shard; here it is an error, with
// a note at the argument the input comes from.
dist.mesh @mesh(tp = 2)
// expected-note @+1 {{the value gets its layout here}}
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<8x8xf32> {nn.param = "w"}) -> tensor<2x8xf32> {
  // expected-error @+1 {{'nn.linear' op input is replicated, but tensor-parallel plan entry 'down' declares input_layouts shard(-1)}}
  %y = nn.linear %x, %w {path = "down", dist.tp = #dist.tp<rowwise, input = shard(-1), output = replicate, use_local_output = true, entry = "down">} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A tied weight split by one module and used whole by another.
dist.mesh @mesh(tp = 2)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "ids"}, %w: tensor<16x8xf32> {nn.param = "wte.weight"}) -> tensor<2x4x16xf32> {
  // expected-note @+1 {{plan entry 'wte' splits it here}}
  %e = nn.embedding %w, %ids {path = "wte", dist.tp = #dist.tp<rowwise, input = replicate, output = replicate, use_local_output = true, entry = "wte">} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'nn.linear' op uses parameter '"wte.weight"' whole, but plan entry 'wte' splits it over tp; give this module a plan entry too}}
  %l = nn.linear %e, %w {path = "lm_head"} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}

// -----

// A tied weight split on two dims by two plan entries: the error is at the
// second module, with a note at the first.
dist.mesh @mesh(tp = 2)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "ids"}, %w: tensor<16x8xf32> {nn.param = "wte.weight"}) -> tensor<2x4x16xf32> {
  // expected-note @+1 {{plan entry 'wte' splits it here}}
  %e = nn.embedding %w, %ids {path = "wte", dist.tp = #dist.tp<rowwise, input = replicate, output = replicate, use_local_output = true, entry = "wte">} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'nn.linear' op splits parameter '"wte.weight"' on dim 1, but plan entry 'wte' splits it on dim 0 (tied weights need one layout)}}
  %l = nn.linear %e, %w {path = "lm_head", dist.tp = #dist.tp<rowwise, input = shard(-1), output = replicate, use_local_output = true, entry = "lm_head">} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}

// -----

// A norm over a feature dim the plan left sharded (o_proj made
// column-parallel by mistake) cannot be computed per rank.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<8x8xf32> {nn.param = "w"}, %g: tensor<8xf32> {nn.param = "g"}) -> tensor<2x8xf32> {
  %y = nn.linear %x, %w {path = "o_proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "o_proj">} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  // expected-error @+1 {{'nn.rms_norm' op normalizes along dim 1, which is sharded}}
  %n = nn.rms_norm %y, %g {eps = 1.0e-6 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %n : tensor<2x8xf32>
}

// -----

// Sequence parallelism applies to norms only.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"}, %w: tensor<8x8xf32> {nn.param = "w"}) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.linear' op is matched by sequence-parallel plan entry 'up', which applies to norms}}
  %y = nn.linear %x, %w {path = "up", dist.tp = #dist.tp<sequence_parallel, input = shard(1), output = shard(1), use_local_output = false, entry = "up">} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Attention runs on the rank's heads: a key and value every rank holds whole
// are cut to those heads.
// CHECK-LABEL: func.func @forward(
// CHECK: %[[K:.+]] = dist.all_slice %{{.+}} on @mesh[tp] slice_dim = 2 : tensor<2x4x2x4xf32> -> tensor<2x4x1x4xf32>
// CHECK: nn.attention %{{.+}}, %[[K]], %[[K]] {causal}
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"}, %wq: tensor<8x8xf32> {nn.param = "wq"}, %k: tensor<2x4x2x4xf32> {nn.input = "k"}) -> tensor<2x4x2x4xf32> {
  %q = nn.linear %x, %wq {path = "q_proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "q_proj">} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h = nn.reshape %q to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %a, %a_lse = nn.attention %h, %k, %k {causal} : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  return %a : tensor<2x4x2x4xf32>
}

// -----

// The query must be split by heads.
dist.mesh @mesh(tp = 2)
func.func @forward(%q: tensor<2x4x2x4xf32> {nn.input = "q"}, %x: tensor<2x4x8xf32> {nn.input = "x"}, %wk: tensor<8x8xf32> {nn.param = "wk"}) -> tensor<2x4x2x4xf32> {
  %k = nn.linear %x, %wk {path = "k_proj", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "k_proj">} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h = nn.reshape %k to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  // expected-error @+1 {{'nn.attention' op cannot be partitioned with operand #0 replicated}}
  %a, %a_lse = nn.attention %q, %h, %h {causal} : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  return %a : tensor<2x4x2x4xf32>
}

// -----

// A style on an op that is neither a linear, an embedding nor a Conv1D.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}) -> tensor<2x8xf32> {
  // expected-error @+1 {{'nn.silu' op is matched by tensor-parallel plan entry 'act' (colwise), which applies to linear, embedding and Conv1D (matmul + add) modules}}
  %y = nn.silu %x {path = "act", dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "act">} : tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A cross-entropy of logits sharded on another dim than the vocabulary.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"}, %labels: tensor<2x4xi64> {nn.input = "labels"}, %g: tensor<8xf32> {nn.param = "g"}) -> tensor<f32> {
  %n = nn.rms_norm %x, %g {eps = 1.0e-6 : f64, path = "norm", dist.tp = #dist.tp<sequence_parallel, input = shard(1), output = shard(1), use_local_output = false, entry = "norm">} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'nn.cross_entropy' op takes logits sharded on dim 1; a cross-entropy is partitioned only over the vocabulary (lm_head column-parallel with output_layouts Shard(-1))}}
  %l = nn.cross_entropy %n, %labels : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
