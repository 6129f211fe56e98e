// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step="optimizer=none" | FileCheck %s --check-prefix=GRAD
// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step="optimizer=sgd momentum=0.9 max-grad-norm=1.0 microbatches=2" | FileCheck %s --check-prefix=SGD
// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step="optimizer=none param-dtype=bf16 output-dtype=f32" | FileCheck %s --check-prefix=BF16
// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step="lr-schedule=cosine warmup-steps=2 total-steps=10 min-lr-ratio=0.1 eval=true" | FileCheck %s --check-prefix=SCHED
// fsdp-build-train-step turns a forward function into one training step:
// the loss is summed and divided by the token count, autodiff emits the
// backward ops, and the optimizer's results update parameters and state.

// Tests an embedding, a linear head and the loss.
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"},
                   %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight", nn.init = #nn.init<normal, mean = 0.0, std = 0.02>},
                   %w: tensor<16x8xf32> {nn.param = "head.weight", nn.init = #nn.init<normal, mean = 0.0, std = 0.02>},
                   %b: tensor<16xf32> {nn.param = "head.bias"})
    -> (tensor<f32> {nn.output = "loss"}, tensor<2x4x16xf32> {nn.output = "logits"}) {
  %x = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %h = nn.silu %x : tensor<2x4x8xf32>
  %logits = nn.linear %h, %w, %b : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss, %logits : tensor<f32>, tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<2x4xi64> {nn.input = "input_ids"}
// CHECK-SAME: %[[LABELS:[^:]+]]: tensor<2x4xi64> {nn.input = "labels"}
// CHECK-SAME: %[[STEP:[^:]+]]: tensor<f32> {nn.input = "optimizer_step"}
// CHECK-SAME: %[[TABLE:[^:]+]]: tensor<16x8xf32> {nn.init = {{.*}}, nn.param = "embed.weight"}
// CHECK-SAME: %[[W:[^:]+]]: tensor<16x8xf32> {{.*}}nn.param = "head.weight"}
// CHECK-SAME: %[[B:[^:]+]]: tensor<16xf32> {nn.param = "head.bias"}
// CHECK-SAME: %[[M0:[^:]+]]: tensor<16x8xf32> {nn.state = "embed.weight.exp_avg"}
// CHECK-SAME: %[[V0:[^:]+]]: tensor<16x8xf32> {nn.state = "embed.weight.exp_avg_sq"}
// CHECK-SAME: -> (tensor<f32> {nn.output = "loss"}, tensor<16x8xf32> {nn.output = "updated.embed.weight", nn.updates = 3 : i64}
// CHECK-SAME: {nn.output = "updated.embed.weight.exp_avg", nn.updates = 6 : i64}
// CHECK-SAME: tensor<2x4x16xf32> {nn.output = "logits"}, tensor<f32> {nn.output = "lr"})
// CHECK: %[[COUNT:.+]] = nn.token_count %[[LABELS]]
// CHECK: %[[ONE:.+]] = nn.fill 1.000000e+00
// CHECK: %[[SEED:.+]] = nn.div %[[ONE]], %[[COUNT]]
// CHECK: %[[X:.+]] = nn.embedding %[[TABLE]], %[[IDS]]
// CHECK: %[[H:.+]] = nn.silu %[[X]]
// CHECK: %[[LOGITS:.+]] = nn.linear %[[H]], %[[W]], %[[B]]
// CHECK: %[[SUM:.+]] = nn.cross_entropy %[[LOGITS]], %[[LABELS]] {reduction = "sum"}
// CHECK: %[[DLOGITS:.+]] = nn.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[SEED]] {reduction = "sum"}
// CHECK: %[[DH:.+]] = nn.matmul %[[DLOGITS]], %[[W]] : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[DW:.+]] = nn.matmul %{{.+}}, %{{.+}} {transpose_a} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[DB:.+]] = nn.reduce_sum_to %[[DLOGITS]] to [16]
// CHECK: %[[DX:.+]] = nn.silu_grad %[[X]], %[[DH]]
// CHECK: %[[DTABLE:.+]] = nn.embedding_grad %[[IDS]], %[[DX]] {num_embeddings = 16 : i64}
// CHECK: %[[LOSS:.+]] = nn.div %[[SUM]], %[[COUNT]]
// CHECK: %[[SCALE:.+]] = nn.fill 1.000000e+00
// CHECK: %[[P0:.+]], %[[M1:.+]], %[[V1:.+]] = nn.adamw %[[TABLE]], %[[DTABLE]], %[[M0]], %[[V0]], %[[STEP]], %[[SCALE]] {beta1 = 9.000000e-01 : f64, beta2 = {{.+}} : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64}
// CHECK: nn.adamw %[[W]], %[[DW]],
// CHECK: nn.adamw %[[B]], %[[DB]],
// CHECK: return %[[LOSS]], %[[P0]], %[[M1]], %[[V1]],

// GRAD-LABEL: func.func @forward(
// GRAD-NOT: optimizer_step
// GRAD-SAME: -> (tensor<f32> {nn.output = "loss"}, tensor<16x8xf32> {nn.output = "grad.embed.weight"}, tensor<16x8xf32> {nn.output = "grad.head.weight"}, tensor<16xf32> {nn.output = "grad.head.bias"}, tensor<2x4x16xf32> {nn.output = "logits"})
// GRAD-NOT: nn.adamw

// SGD-LABEL: func.func @forward(
// SGD-SAME: %{{[^:]+}}: tensor<4x4xi64> {nn.input = "input_ids"}
// SGD-SAME: {nn.state = "embed.weight.momentum_buffer"}
// SGD: nn.slice %{{.+}} dim 0 start 0 size 2 : tensor<4x4xi64> -> tensor<2x4xi64>
// SGD: nn.token_count
// SGD: nn.slice %{{.+}} dim 0 start 2 size 2 : tensor<4x4xi64> -> tensor<2x4xi64>
// SGD: nn.token_count
// SGD-NOT: nn.slice
// SGD: nn.embedding_grad
// SGD: nn.embedding_grad
// SGD: %[[N0:.+]] = nn.sum_squares
// SGD: %[[N1:.+]] = nn.sum_squares
// SGD: %[[N01:.+]] = nn.add %[[N0]], %[[N1]]
// SGD: %[[COEF:.+]] = nn.clip_coefficient %{{.+}} {max_norm = 1.000000e+00 : f64}
// SGD: nn.sgd %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[COEF]] {lr = 1.000000e-03 : f64, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
// SGD-NOT: logits

// The schedule's factor from the step count scales every update's rate and
// is the step's `lr` output; the eval step has the step's arguments, the
// forward and the mean loss only. SGD's weight decay above is torch's 0.
// SCHED-LABEL: func.func @forward_eval(
// SCHED-SAME: {nn.input = "optimizer_step"}
// SCHED-SAME: {nn.state = "embed.weight.exp_avg_sq"}
// SCHED-SAME: -> (tensor<f32> {nn.output = "loss"})
// SCHED: %[[N:.+]] = nn.token_count
// SCHED: %[[SUM:.+]] = nn.cross_entropy {{.*}}reduction = "sum"
// SCHED-NOT: _grad
// SCHED-NOT: nn.adamw
// SCHED: %[[MEAN:.+]] = nn.div %[[SUM]], %[[N]]
// SCHED-NEXT: return %[[MEAN]] : tensor<f32>
// SCHED-LABEL: func.func @forward(
// SCHED-SAME: %[[STEP:[^:]+]]: tensor<f32> {nn.input = "optimizer_step"}
// SCHED: %[[F:.+]] = nn.lr_schedule %[[STEP]] cosine {min_ratio = 1.000000e-01 : f64, total_steps = 10 : i64, warmup_steps = 2 : i64}
// SCHED: nn.adamw {{.*}} lr_scale %[[F]] {{{.*}}lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64}
// SCHED: %[[LR:.+]] = nn.scale %[[F]] by 1.000000e-03
// SCHED: return {{.*}}, %[[LR]] :

// BF16-LABEL: func.func @forward(
// BF16: %[[T:.+]] = nn.cast %{{.+}} to bf16 : tensor<16x8xf32> -> tensor<16x8xbf16>
// BF16: nn.embedding %[[T]], %{{.+}} : (tensor<16x8xbf16>, tensor<2x4xi64>) -> tensor<2x4x8xbf16>
// BF16: nn.cross_entropy %{{.+}}, %{{.+}} {{.*}} : (tensor<2x4x16xbf16>, tensor<2x4xi64>) -> tensor<f32>
// BF16: nn.cast %{{.+}} to f32 : tensor<2x4x16xbf16> -> tensor<2x4x16xf32>
// BF16: %[[G:.+]] = nn.embedding_grad %{{.+}}, %{{.+}} {num_embeddings = 16 : i64} : (tensor<2x4xi64>, tensor<2x4x8xbf16>) -> tensor<16x8xbf16>
// BF16: nn.cast %[[G]] to f32 : tensor<16x8xbf16> -> tensor<16x8xf32>
