# Sourced by scripts/test.sh and scripts/test-sanitizers.sh: the tests that run on the
# optimized build (build/) only. Every other test runs once, under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/), which checks more than the optimized build
# and runs the same code. The sanitizer build does not build the test programs that hold
# only such tests (training_test, attacks_test, deploy_test: their CMakeLists.txt).
#   Training.*       timed training runs on Fashion-MNIST (4-8 nodes, 600-1200 steps): about
#                    10x slower under ASan, so they overrun gossipctl's fixed 120 s bound
#                    (the 4-node one alone takes 90 s); the integration tests run the same
#                    daemon, strategy and codec code on smaller models.
#   Attacks.*        training runs under attack (tests/security/), timed against undisturbed
#                    ones, for the same reason; JoinAttack.* and the unit tests of each fix
#                    run under ASan.
#   Experiments.*    the experiment matrix, churn and the namespace testbed: Python driving
#                    the same binaries through long training runs and rate measurements.
#   PythonClient.*   loads libgossip.so into Debian's python3, which ASan refuses for an
#                    instrumented library (its runtime must be loaded first); CApi.* covers
#                    the C ABI under ASan.
#   Install.*        cmake --install and a consumer project built and run against it: a
#                    consumer of an instrumented libgossip would need ASan's runtime first.
#   Deploy.*         clusters started as deployments start them: names resolved through
#                    nss_wrapper (LD_PRELOAD, which an ASan binary refuses before its runtime),
#                    a real Slurm, Prometheus and the Kubernetes pods on network namespaces.
#                    Install.DebianPackagesInstallAndRemove installs what
#                    scripts/build-packages.sh built (test.sh builds them first).
#   GossipTrain.StandaloneRecipeReachesEightyEightPercent
#                    the documented single-node recipe, 6,000 steps: skipped without NDEBUG.
#   Fuzz.Short       builds its own clang ASan+UBSan build (build-fuzz/) and fuzzes; the
#                    corpus replays (Fuzz.Replay.*) run under ASan.
#   DenseCodecsLarge.*, Topk.ApproximateCountWithinToleranceAndTopMagnitudes,
#   CnnGradient.MatchesFiniteDifferences, MlpTraining.{ThreeHundredSteps..,AShard..}
#                    arithmetic at scale (512 MB through a codec, 72 top-k selections of up
#                    to 400k, a finite difference per CNN weight, 300 training steps):
#                    156 s of test time in the sanitizer stage for code that the same files'
#                    small cases run under ASan (CI run 14); optimized, a fifth of that.
#   Simulation.{TheMlpLearns..,SmaTrainsTheMlp..,UnderChurn..,ARestartedNode..,
#   TheMessagesANodeSends..},
#   TopologySpectralGap.PastTheDenseLimit*, SimulatedJoins.NoIdIsGivenTwice..
#                    the simulator at scale (up to 1,000 nodes, a hundred joins, the MLP on
#                    every node): 125 s of test time in the sanitizer stage (CI run 56),
#                    for paths that its small cases (a death, a restart, a partition, a
#                    join, the dense spectra) run under ASan; optimized, 12 s.
# shellcheck disable=SC2034
optimized_tests='^(Training|Attacks|Experiments|PythonClient|Install|Deploy)\.|^Fuzz\.Short$|^GossipTrain\.StandaloneRecipe|^DenseCodecsLarge\.|^Topk\.ApproximateCountWithinTolerance|^CnnGradient\.MatchesFiniteDifferences$|^MlpTraining\.(ThreeHundredSteps|AShardTrainsToo)|^Simulation\.(TheMlpLearnsFashionMnist|SmaTrainsTheMlp|UnderChurnADeadProcess|ARestartedNodeTakesAPeersModel|TheMessagesANodeSendsGrow)|^TopologySpectralGap\.PastTheDenseLimit|^SimulatedJoins\.NoIdIsGivenTwice'
# Of those, the ones that neither time anything nor start a cluster (arithmetic at scale,
# the simulator in virtual time, a trainer alone, the fuzzer for its ten seconds):
# scripts/test.sh runs them beside the sanitizer stage, at the lowest priority, in the
# CPU time that stage leaves idle (its tests wait on sockets and deadlines a fifth of the
# time), instead of after it: some 85 CPU-seconds (2026-12-08).
# shellcheck disable=SC2034
background_tests='^Fuzz\.Short$|^GossipTrain\.StandaloneRecipe|^Training\.TheCnnLearnsFashionMnistAlone$|^DenseCodecsLarge\.|^Topk\.ApproximateCountWithinTolerance|^CnnGradient\.MatchesFiniteDifferences$|^MlpTraining\.(ThreeHundredSteps|AShardTrainsToo)|^Simulation\.(TheMlpLearnsFashionMnist|SmaTrainsTheMlp|UnderChurnADeadProcess|ARestartedNodeTakesAPeersModel|TheMessagesANodeSendsGrow)|^TopologySpectralGap\.PastTheDenseLimit|^SimulatedJoins\.NoIdIsGivenTwice|^Experiments\.ScaleSweep$|^PythonClient\.(LarsAndLambFollowThePapers|PackageInstallsAndImports)$'
# What those tests need built: the programs they drive, the C ABI, their test binaries;
# and the benchmarks, which the sanitizer build leaves out, so that they keep compiling.
# shellcheck disable=SC2034
optimized_targets=(gossipd gossipctl gossip-train gossip test_trainer training_test
                   attacks_test gossip-attacker gossipd-byzantine sync_trainer compression_bench
                   ring_bench deploy_test gossip_train_cli_test compression_dense_codecs_test
                   compression_sparse_codecs_test trainer_cnn_test trainer_training_test
                   sim_world_test sim_joins_test peers_topology_test)
