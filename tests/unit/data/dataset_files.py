"""Tiny datasets written in each loader's exact on-disk format, and a local HTTP server.

Every writer produces the smallest files the real PyG/OGB readers accept, so the loaders run
their real code (parsing, processing, downloading) without the real datasets or a network.
"""

from __future__ import annotations

import gzip
import http.server
import io
import json
import pickle
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np


# ------------------------------------------------------------------------------ graphs
def ring_graph(n: int, num_classes: int, num_features: int, seed: int = 0):
    """A ring plus chords: (edges [2, E] undirected, features [n, F] binary, labels [n])."""
    rng = np.random.default_rng(seed)
    src = np.arange(n)
    dst = (src + 1) % n
    chords = rng.integers(0, n, size=(2, n))
    edges = np.concatenate([np.stack([src, dst]), chords], axis=1)
    edges = edges[:, edges[0] != edges[1]]
    edges = np.concatenate([edges, edges[::-1]], axis=1)
    edges = np.unique(edges, axis=1)
    x = (rng.random((n, num_features)) < 0.3).astype(np.float32)
    y = np.arange(n) % num_classes
    return edges.astype(np.int64), x, y.astype(np.int64)


def shchur_npz(path: Path, n: int = 40, num_classes: int = 3, num_features: int = 6) -> None:
    """The ``gnn-benchmark`` npz of Amazon and Coauthor (CSR adjacency and attributes)."""
    import scipy.sparse as sp

    edges, x, y = ring_graph(n, num_classes, num_features)
    adj = sp.csr_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(n, n))
    attr = sp.csr_matrix(x)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=np.array(adj.shape),
        attr_data=attr.data,
        attr_indices=attr.indices,
        attr_indptr=attr.indptr,
        attr_shape=np.array(attr.shape),
        labels=y,
    )


def planetoid_files(folder: Path, key: str, num_classes: int = 3, num_features: int = 5) -> None:
    """``ind.<key>.{x,tx,allx,y,ty,ally,graph,test.index}`` (Planetoid's pickles): 20 labelled
    training rows, 500 validation rows beyond them (PyG's public split needs them), 10 test."""
    rng = np.random.default_rng(0)
    n_all, n_train, n_test = 560, 20, 10
    n = n_all + n_test

    def onehot(labels: np.ndarray) -> np.ndarray:
        return np.eye(num_classes, dtype=np.float32)[labels]

    labels = np.arange(n) % num_classes
    feats = (rng.random((n, num_features)) < 0.4).astype(np.float32)
    test_index = np.arange(n_all, n)
    objects = {
        "x": feats[:n_train],
        "y": onehot(labels[:n_train]),
        "allx": feats[:n_all],
        "ally": onehot(labels[:n_all]),
        "tx": feats[n_all:],
        "ty": onehot(labels[n_all:]),
        "graph": {i: [(i + 1) % n, (i + 7) % n] for i in range(n)},
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in objects.items():
        with open(folder / f"ind.{key}.{name}", "wb") as f:
            pickle.dump(obj, f)
    (folder / f"ind.{key}.test.index").write_text("\n".join(map(str, test_index)) + "\n")


def wikics_json(path: Path, n: int = 30, num_splits: int = 20) -> None:
    """WikiCS's ``data.json``: features, labels, adjacency lists, 20 train/val masks, 1 test."""
    rng = np.random.default_rng(0)
    roles = rng.integers(0, 3, size=(num_splits, n))
    data = {
        "features": rng.random((n, 4)).round(3).tolist(),
        "labels": (np.arange(n) % 3).tolist(),
        "links": [[(i + 1) % n, (i + 5) % n] for i in range(n)],
        "train_masks": (roles == 0).tolist(),
        "val_masks": (roles == 1).tolist(),
        "stopping_masks": (roles == 2).tolist(),
        "test_mask": (np.arange(n) % 2 == 0).tolist(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def flickr_files(raw: Path, n: int = 30) -> None:
    """GraphSAINT's Flickr files: ``adj_full.npz``, ``feats.npy``, ``class_map.json``,
    ``role.json`` (train/val/test node ids)."""
    import scipy.sparse as sp

    edges, x, y = ring_graph(n, 3, 4)
    adj = sp.csr_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(n, n))
    raw.mkdir(parents=True, exist_ok=True)
    np.savez(
        raw / "adj_full.npz",
        data=adj.data,
        indices=adj.indices,
        indptr=adj.indptr,
        shape=np.array(adj.shape),
    )
    np.save(raw / "feats.npy", x)
    (raw / "class_map.json").write_text(json.dumps({str(i): int(y[i]) for i in range(n)}))
    ids = np.arange(n)
    role = {
        "tr": ids[: n // 2].tolist(),
        "va": ids[n // 2 : 3 * n // 4].tolist(),
        "te": ids[3 * n // 4 :].tolist(),
    }
    (raw / "role.json").write_text(json.dumps(role))


def _csv_gz(rows: np.ndarray) -> bytes:
    text = "\n".join(",".join(str(v) for v in np.atleast_1d(r)) for r in rows) + "\n"
    return gzip.compress(text.encode())


def ogbn_zip(path: Path, download_name: str, split: str, n: int = 50, extra_year: bool = True):
    """An OGB node dataset archive (``<download_name>/raw``, ``split/<split>``, release file),
    as ``PygNodePropPredDataset`` downloads and reads it. Returns the (train, valid, test)."""
    edges, x, y = ring_graph(n, 4, 3)
    edges = edges[:, edges[0] < edges[1]]  # one direction; OGB adds inverses when asked
    ids = np.arange(n)
    parts = {"train": ids[: n // 2], "valid": ids[n // 2 : 3 * n // 4], "test": ids[3 * n // 4 :]}
    files = {
        "raw/edge.csv.gz": _csv_gz(edges.T),
        "raw/node-feat.csv.gz": _csv_gz(x),
        "raw/node-label.csv.gz": _csv_gz(y.reshape(-1, 1)),
        "raw/num-node-list.csv.gz": _csv_gz(np.array([n])),
        "raw/num-edge-list.csv.gz": _csv_gz(np.array([edges.shape[1]])),
        "RELEASE_v1.txt": b"tiny\n",
    }
    if extra_year:
        files["raw/node_year.csv.gz"] = _csv_gz((2000 + ids % 10).reshape(-1, 1))
    for part, idx in parts.items():
        files[f"split/{split}/{part}.csv.gz"] = _csv_gz(idx)
    _zip(path, download_name, files)
    return parts


def ogbg_zip(path: Path, download_name: str = "hiv", num_graphs: int = 12) -> dict:
    """An OGB molecule archive (``ogbg-mol*``): 9 atom and 3 bond integer features per graph,
    binary labels and a ``split/scaffold``. Returns the split indices."""
    rng = np.random.default_rng(0)
    edges, nodes, node_feat, edge_feat, n_nodes, n_edges = [], [], [], [], [], []
    for g in range(num_graphs):
        k = 3 + g % 3
        src = np.arange(k - 1)
        edges.append(np.stack([src, src + 1], axis=1))
        node_feat.append(rng.integers(0, 5, size=(k, 9)))
        edge_feat.append(rng.integers(0, 3, size=(k - 1, 3)))
        n_nodes.append(k)
        n_edges.append(k - 1)
        nodes.append(k)
    labels = (np.arange(num_graphs) % 2).reshape(-1, 1)
    ids = np.arange(num_graphs)
    parts = {"train": ids[:8], "valid": ids[8:10], "test": ids[10:]}
    files = {
        "raw/edge.csv.gz": _csv_gz(np.concatenate(edges)),
        "raw/node-feat.csv.gz": _csv_gz(np.concatenate(node_feat)),
        "raw/edge-feat.csv.gz": _csv_gz(np.concatenate(edge_feat)),
        "raw/graph-label.csv.gz": _csv_gz(labels),
        "raw/num-node-list.csv.gz": _csv_gz(np.array(n_nodes)),
        "raw/num-edge-list.csv.gz": _csv_gz(np.array(n_edges)),
        "RELEASE_v1.txt": b"tiny\n",
    }
    for part, idx in parts.items():
        files[f"split/scaffold/{part}.csv.gz"] = _csv_gz(idx)
    _zip(path, download_name, files)
    return parts


def _zip(path: Path, top: str, files: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, blob in files.items():
            z.writestr(f"{top}/{name}", blob)
    path.write_bytes(buf.getvalue())


def unzip_to(archive: Path, folder: Path) -> None:
    """Extract an archive written by :func:`ogbn_zip`/:func:`ogbg_zip` into ``folder`` (the
    dataset folder itself, without the archive's top-level directory)."""
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            rel = Path(*Path(info.filename).parts[1:])
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(z.read(info))


def need_ogb() -> None:
    """Skip unless ``ogb`` imports (through graphssl, which turns off its PyPI check)."""
    import pytest

    from graphssl.data.ogb_datasets import require_ogb

    try:
        require_ogb("tests")
    except ImportError as err:
        pytest.skip(str(err))


# -------------------------------------------------------------------------- HTTP server
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http_server(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``folder`` on ``127.0.0.1`` (a free port) in a thread; yields the base URL and
    the list of request paths received."""
    requests: list[str] = []

    class Handler(_Quiet):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[misc]

        def do_GET(self) -> None:
            requests.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[str]:
    """A listening socket on ``127.0.0.1`` that accepts connections and never answers (a
    stalled server); yields its base URL."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def closed_port_url() -> str:
    """A URL on ``127.0.0.1`` at a port nothing listens on (connections are refused)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
